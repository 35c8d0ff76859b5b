"""The token classes attention statistics are split by (Clark et al. 2019, §3): [CLS], [SEP],
punctuation ("." and ","), every other token; -1 marks padding. The batcher assigns them
(``jattn.runner.token_classes``); a method reads them as ``token_class``, ``query_class`` and
``key_class``, and a statistic's class axis is in ``CLASS_NAMES`` order."""

CLS, SEP, PUNCT, OTHER = 0, 1, 2, 3
CLASS_NAMES = ("cls", "sep", "punct", "other")
