"""The family conformance table: every family of jattn's registry (``jattn.families.names()``) as one row of
data, {family: (tiny Hugging Face config, heads, quirks)}, and which of the conformance checks run on it
(the shape of penzai's consistency tests and levanter's config-parametrized tests). The test files
``test_conformance_{encoder,decoder,seq2seq}.py`` run the checks; a family's own file
(``test_<family>.py``) holds only what no other family has.

A row's ``checks`` map a check to how it runs on the row's variants (the first variant is the main one):
``FAST`` on every variant; ``FIRST`` on the main one, the others slow with the main one's test as their fast
twin (they run the same code, differing in sizes or options the fast checks cover); ``ONLY`` on the main
one alone; ``slow(twin)`` slow everywhere (``slow(twin, only=True)``: on the main variant alone), ``twin`` the
default-suite test running the same code path. A check a row does not name does not apply (or the family's file
runs it its own way)."""

from __future__ import annotations

import dataclasses

import pytest

from lm_family_parity import GPT2

FAST, FIRST, ONLY = "fast", "first", "only"
HERE = "tests/families/test_conformance_{}.py::"
ENC, DEC, S2S = HERE.format("encoder"), HERE.format("decoder"), HERE.format("seq2seq")
SEARCHES = ((1, 1.0, 12), (4, 1.0, 12), (4, 0.6, 10), (4, 2.0, 14))  # (beams, length penalty, max length)


def slow(twin: str, only: bool = False) -> str:
    """Slow on every variant (``only``: on the main one alone), ``twin`` the fast test of the same code path."""
    return ("slow1:" if only else "slow:") + twin


@dataclasses.dataclass(frozen=True)
class Row:
    shape: str  # the registry's: "encoder" | "decoder" | "encoder-decoder"
    config: str = ""  # transformers' config class (encoders, decoders); seq2seq: the tests/tiny_*.py builder module
    heads: dict = dataclasses.field(default_factory=dict)  # head -> transformers' model class
    fields: dict = dataclasses.field(default_factory=dict)  # the tiny config
    variants: dict = dataclasses.field(default_factory=lambda: {"": {}})  # case -> fields over ``fields``
    checks: dict = dataclasses.field(default_factory=dict)  # check -> FAST | FIRST | ONLY | slow(twin)
    lengths: tuple = ()  # the padded batch's row lengths (encoders, decoders)
    seed: int = 0  # the batch's seed
    types: bool = True  # the batch has token types (a variant may say "types")
    real_rows: bool = False  # HF's padding query rows differ (DeBERTa): compare the real rows
    bias: str = ""  # a parameter drawn N(0, 1) so that it moves α (a relative-position table)
    expect: dict = dataclasses.field(default_factory=dict)  # check -> {config attribute: value}
    holds: dict = dataclasses.field(default_factory=dict)  # check -> predicate(model, oracle) that must hold
    kw: dict = dataclasses.field(default_factory=dict)  # check -> fields of that check's checkpoint
    mlm: tuple = ({},)  # the masked-LM head's cases (fields), ids from their values
    mlm_transform_terms: bool = True  # the masked-LM tolerance counts the transform's sum over D
    trips: tuple = ("base",)  # the heads exported in the round trip
    same_keys: bool = True  # the export has the checkpoint's keys
    drop: tuple = ("position_ids", "token_type_ids")  # checkpoint keys the export leaves out (substrings)
    text: tuple = ()  # (tokenizer, head, fields) of the complete folder ``jattn analyze`` reads
    refused: tuple = ()  # (config.json change, error match): refused by config_from_hf
    accepted: dict = dataclasses.field(default_factory=dict)  # older config.json fields read as the current ones
    values_slice: object = None  # causal LMs: the values out of the value module's output (GPT-2's fused c_attn)
    searches: tuple = ()  # the searches of the main case that run fast (seq2seq), the beam counts (decoders)
    searched: tuple = SEARCHES  # seq2seq: every search run
    gone: tuple = ()  # seq2seq: checkpoint keys whose absence conversion names
    missing_tokenizer: str = ""  # seq2seq: the error of a folder without tokenizer.json
    export_only: str = ""  # seq2seq: the error of to_hf_config on another family's config
    language: str = ""  # seq2seq: a language code to force per call


def variants(name: str) -> list[tuple[str, dict]]:
    """(case, fields) of a row: the case id is the family's name, or the variant's where it has several."""
    row = FAMILIES[name]
    return [(case or name, {**row.fields, **over}) for case, over in row.variants.items()]


def cases(check: str, shape: str) -> list:
    """pytest params (family, case) of every row of ``shape`` that runs ``check``, marked as its status says."""
    out = []
    for name, row in FAMILIES.items():
        how = row.checks.get(check, ONLY if check == "refused" and row.refused else None)
        if row.shape != shape or how is None:
            continue
        for i, (case, _) in enumerate(variants(name)):
            if (how == ONLY or how.startswith("slow1:")) and i:
                continue
            marks = mark(how, i, check_test(check, shape).format(case=variants(name)[0][0]))
            out.append(pytest.param(name, case, id=case, marks=marks))
    return out


def mark(how: str, i: int, main: str):
    if how.startswith(("slow:", "slow1:")):
        return pytest.mark.slow(twin=how.split(":", 1)[1])
    return pytest.mark.slow(twin=main) if how == FIRST and i else ()


def check_test(check: str, shape: str) -> str:
    """The node id of a check's test, ``{case}`` to fill in: the checks that take no parameters of their own run in
    one test of each file, ``test_check[<case>-<check>]``."""
    test = {"encoder": ENC, "decoder": DEC, "encoder-decoder": S2S}[shape]
    return test + (f"{TESTS[check]}[{{case}}]" if check in TESTS else "test_check[{case}-" + check + "]")


TESTS = {"classifier": "test_classifier_head", "mlm": "test_mlm_head", "trip": "test_hf_round_trip",
         "analyze": "test_analyze_cli_and_patch_heads", "new_classifier": "test_new_classifier",
         "pruned_export": "test_pruned_export", "generate": "test_generate_matches_hf"}

ROBERTA = dict(vocab_size=80, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
               max_position_embeddings=40, hidden_act="gelu", type_vocab_size=1, pad_token_id=1, bos_token_id=0,
               eos_token_id=2, layer_norm_eps=1e-5)
# the same post-LN layers and intervention code as RoBERTa's (the family differs in embeddings, keys or tokenizer)
POST_LN = {k: slow(ENC + f"test_check[roberta-{k}]") for k in ("gates", "disabled", "pruned")}
DEBERTA = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
               max_position_embeddings=64, hidden_act="gelu", layer_norm_eps=1e-7, relative_attention=True,
               position_buckets=16, max_relative_positions=64, pos_att_type="p2c|c2p")
LM = dict(vocab_size=80, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
          intermediate_size=40, max_position_embeddings=64, bos_token_id=0, eos_token_id=1, pad_token_id=2,
          rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 500.0})
LM_CHECKS = dict(config=FAST, outputs=FAST, gates=FAST, disabled=FAST, generate=FAST, export=FAST)
LLAMA_CONFIG = dict(causal=True, norm="rms", gated_ffn=True, rotary_theta=500.0, kv_heads=2, kv_head=(0, 0, 1, 1))


def mlm_kernel(shape):
    return lambda m, hf: m.params["mlm_head"]["transform"]["kernel"][...].shape == shape


ENCODERS = {
    "bert": Row("encoder", "BertConfig", dict(base="BertModel", cls="BertForSequenceClassification"),
                {**ROBERTA, "type_vocab_size": 2, "pad_token_id": 0}, lengths=(15, 9, 4, 15), seed=3,
                checks=dict(outputs=slow("tests/test_encoder_parity.py::test_tiny_parity_with_padding"),
                            classifier=slow(ENC + "test_classifier_head[roberta]"), **POST_LN)),
    "roberta": Row("encoder", "RobertaConfig", dict(base="RobertaModel", cls="RobertaForSequenceClassification"),
                   ROBERTA, lengths=(15, 9, 4, 15), seed=3, types=False,
                   checks=dict(outputs=FAST, gates=FAST, disabled=FAST, pruned=FAST, classifier=FAST),
                   expect=dict(classifier=dict(num_labels=3, classifier="dense_tanh"))),
    "xlm-roberta": Row(
        "encoder", "XLMRobertaConfig", dict(base="XLMRobertaModel", mlm="XLMRobertaForMaskedLM",
                                            cls="XLMRobertaForSequenceClassification"),
        {**ROBERTA, "vocab_size": 96}, lengths=(15, 9, 4, 15), seed=5, types=False,
        checks=dict(POST_LN, config=FAST, outputs=FAST, classifier=slow(ENC + "test_classifier_head[roberta]"),
                    mlm=FAST, trip=FAST, analyze=FAST, new_classifier=FAST),
        expect=dict(config=dict(model_type="xlm-roberta", positions="after_padding", classifier="dense_tanh",
                                mlm_activation="gelu", max_length=38),
                    classifier=dict(num_labels=3, classifier_dropout=0.3), trip=dict(model_type="xlm-roberta")),
        holds=dict(config=lambda m, hf: m.family.model_type == "xlm-roberta"),
        kw=dict(classifier=dict(classifier_dropout=0.3)), trips=("base", "cls", "mlm"),
        text=("xlm-roberta", "base", {})),
    "electra": Row(
        "encoder", "ElectraConfig",
        dict(base="ElectraModel", mlm="ElectraForMaskedLM", pretraining="ElectraForPreTraining"),
        dict(vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=48, hidden_act="gelu", type_vocab_size=2, layer_norm_eps=1e-12,
             embedding_size=16),
        variants={"electra-project-16-to-32": {}, "electra-no-projection": dict(embedding_size=32)},
        lengths=(13, 8, 3, 13), seed=2,
        checks=dict(POST_LN, config=FAST, outputs=FAST, trip=FAST,
                    analyze=slow(ENC + "test_analyze_cli_and_patch_heads[xlm-roberta]")),
        holds=dict(config=lambda m, hf: m.config.embedding_size == (None if hf.config.embedding_size == 32 else 16)
                   and ("project" in m.params["embeddings"]) == (hf.config.embedding_size != 32)),
        expect=dict(config=dict(with_pooler=False)), text=("wordpiece", "mlm", {})),
    "albert": Row(
        "encoder", "AlbertConfig", dict(base="AlbertModel", mlm="AlbertForMaskedLM",
                                        cls="AlbertForSequenceClassification", pretraining="AlbertForPreTraining"),
        dict(vocab_size=90, embedding_size=16, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
             intermediate_size=48, max_position_embeddings=40, type_vocab_size=2), lengths=(13, 8, 3, 13), seed=6,
        checks=dict(POST_LN, config=FAST, outputs=FAST, classifier=slow(ENC + "test_new_classifier[albert]"),
                    mlm=FAST, trip=FAST, analyze=slow(ENC + "test_analyze_cli_and_patch_heads[xlm-roberta]"),
                    new_classifier=FAST),
        expect=dict(config=dict(hidden_act="gelu_new", embedding_size=16, classifier="pooler", with_pooler=True),
                    classifier=dict(num_labels=3, classifier_dropout=0.1),
                    trip=dict(num_hidden_groups=3, inner_group_num=1)),
        holds=dict(config=lambda m, hf: m.params["embeddings"]["word"][...].shape == (90, 16),
                   mlm=mlm_kernel((32, 16))),
        mlm=(dict(tie_word_embeddings=True), dict(tie_word_embeddings=False)), trips=("base", "cls", "mlm"),
        same_keys=False, text=("albert", "base", {}),
        refused=tuple((dict([kv]), kv[0]) for kv in (("inner_group_num", 2), ("num_hidden_groups", 4),
                                                     ("embedding_size", 32), ("pruned_heads", {"0": [1]})))),
    "distilbert": Row(
        "encoder", "DistilBertConfig", dict(base="DistilBertModel", mlm="DistilBertForMaskedLM",
                                            cls="DistilBertForSequenceClassification"),
        dict(vocab_size=90, dim=32, n_layers=2, n_heads=4, hidden_dim=48, max_position_embeddings=40,
             activation="gelu"), lengths=(14, 9, 3, 14), seed=4, types=False,
        checks=dict(POST_LN, config=FAST, outputs=FAST, classifier=slow(ENC + "test_new_classifier[distilbert]"),
                    pruned_export=FAST, types_ignored=FAST, mlm=FAST, trip=FAST, new_classifier=FAST,
                    analyze=slow(ENC + "test_analyze_cli_and_patch_heads[xlm-roberta]")),
        expect=dict(config=dict(type_vocab_size=0, layer_norm_eps=1e-12, classifier="dense_relu", positions="absolute",
                                hidden_size=32, num_layers=2, num_heads=4, intermediate_size=48, with_pooler=False,
                                classifier_dropout=0.2), classifier=dict(num_labels=3)),
        holds=dict(config=lambda m, hf: "token_type" not in m.params["embeddings"],
                   classifier=lambda m, hf: set(m.params["classifier"]) == {"dense", "out"}),
        mlm=(dict(tie_word_embeddings=True), dict(tie_word_embeddings=False)), trips=("base", "cls", "mlm"),
        text=("wordpiece", "base", {}),
        refused=((dict(activation="tanh"), 'activation is "tanh"'),
                 (dict(n_heads=5), "dim=32 is not divisible by n_heads=5"))),
    "roberta-prelayernorm": Row(
        "encoder", "RobertaPreLayerNormConfig", dict(base="RobertaPreLayerNormModel",
                                                     cls="RobertaPreLayerNormForSequenceClassification",
                                                     mlm="RobertaPreLayerNormForMaskedLM"),
        ROBERTA, lengths=(15, 9, 4, 15), seed=3, types=False,
        checks=dict(config=FAST, outputs=FAST, gates=FAST, disabled=FAST, pruned=FAST, mlm=FAST, trip=FAST,
                    classifier=slow(ENC + "test_classifier_head[modernbert]")),
        expect=dict(config=dict(norm_position="pre", final_norm=True),
                    classifier=dict(num_labels=3, classifier="dense_tanh")),
        mlm_transform_terms=False, trips=("mlm",), drop=("position_ids", "token_type_ids", "decoder")),
    "mpnet": Row(
        "encoder", "MPNetConfig", dict(base="MPNetModel", mlm="MPNetForMaskedLM", cls="MPNetForSequenceClassification"),
        dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=64, hidden_act="gelu", layer_norm_eps=1e-5),
        lengths=(37, 20, 9, 37), seed=1, types=False, bias="relative_attention_bias",
        checks=dict(POST_LN, config=FAST, outputs=FAST, pruned=FAST, pruned_export=FAST, types_ignored=FAST,
                    classifier=FAST, mlm=FAST, trip=FAST),
        expect=dict(config=dict(relative_position_buckets=32, relative_position_max_distance=128, type_vocab_size=0,
                                positions="after_padding", pad_token_id=1, max_length=62, with_pooler=True),
                    classifier=dict(num_labels=3, with_pooler=False)),
        holds=dict(config=lambda m, hf: m.params["relative_bias"].shape == (32, 4)),
        trips=("base", "cls"), drop=("position_ids", "decoder"),
        refused=((dict(pad_token_id=0), "pad_token_id=0.*Fix: set pad_token_id"),
                 (dict(relative_attention_num_buckets=64),
                  "relative_attention_num_buckets=64.*Fix: set relative_attention_num_buckets"))),
    "deberta-v2": Row(
        "encoder", "DebertaV2Config", dict(base="DebertaV2Model", mlm="DebertaV2ForMaskedLM",
                                           cls="DebertaV2ForSequenceClassification"), DEBERTA,
        variants={"deberta-v3": dict(type_vocab_size=0, position_biased_input=False, share_att_key=True,
                                     norm_rel_ebd="layer_norm", types=False),
                  "deberta-v2": dict(type_vocab_size=2, position_biased_input=True, share_att_key=False,
                                     norm_rel_ebd="none")},
        lengths=(40, 23, 9, 40), seed=1, real_rows=True, bias="rel_embeddings",
        checks=dict(config=FAST, outputs=FAST, gates=FIRST, disabled=FIRST, classifier=FIRST, pruned=ONLY, mlm=ONLY,
                    analyze=slow(ENC + "test_analyze_cli_and_patch_heads[xlm-roberta]")),
        holds=dict(config=lambda m, hf: (m.config.disentangled.terms, m.config.disentangled.scale_factor,
                                         m.config.disentangled.span, m.config.disentangled.buckets)
                   == (("c2p", "p2c"), 3, 16, 16)
                   and m.config.disentangled.shared_projections == hf.config.share_att_key
                   and m.config.position_embeddings == hf.config.position_biased_input
                   and m.params["relative_embeddings"]["table"].shape == (32, 32)
                   and ("positions" in m.params["layers"]) == (not hf.config.share_att_key)),
        expect=dict(classifier=dict(num_labels=3, with_pooler=True, pooler_activation="gelu")),
        mlm=(dict(legacy=True), dict(legacy=False)), text=("deberta-v2", "base", dict(pad_token_id=0)),
        refused=((dict(conv_kernel_size=3), "conv_kernel_size"), (dict(embedding_size=16), "embedding_size"),
                 (dict(pos_att_type="p2c|p2p"), "pos_att_type"))),
    "modernbert": Row(
        "encoder", "ModernBertConfig", dict(base="ModernBertModel", cls="ModernBertForSequenceClassification",
                                            mlm="ModernBertForMaskedLM"),
        dict(vocab_size=80, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=24,
             max_position_embeddings=64, hidden_activation="gelu", pad_token_id=1, bos_token_id=0, eos_token_id=2,
             cls_token_id=0, sep_token_id=2, local_attention=4, global_attn_every_n_layers=2,
             global_rope_theta=160_000.0, local_rope_theta=10.0, norm_eps=1e-5), lengths=(15, 9, 4, 15), seed=3,
        types=False, checks=dict(config=FAST, outputs=FAST, disabled=FAST, classifier=FAST, mlm=FAST, trip=FAST,
                                 gates=slow(ENC + "test_check[roberta-prelayernorm-gates]"),
                                 analyze=slow(ENC + "test_analyze_cli_and_patch_heads[xlm-roberta]")),
        expect=dict(config=dict(norm_position="pre", final_norm=True, first_attention_norm=False, gated_ffn=True,
                                attention_radius=(0, 2, 0, 2), rotary_theta=160_000.0, local_rotary_theta=10.0,
                                attention_bias=False, ffn_bias=False, norm_bias=False, position_embeddings=False),
                    # two layers (one global, one local): the disabling suffix runs from both kinds of layer
                    classifier=dict(attention_radius=(0, 2), num_labels=3, classifier="dense_act_norm")),
        kw=dict(classifier=dict(num_hidden_layers=2)), mlm_transform_terms=False, trips=("mlm",),
        text=("word-level", "base", {}),
        drop=("decoder.weight",), refused=((dict(classifier_pooling="mean"), "classifier_pooling"),)),
}

DECODERS = {
    "gpt2": Row("decoder", "GPT2Config", dict(lm="GPT2LMHeadModel"), GPT2, lengths=(11, 6, 3, 11), seed=3,
                checks=dict(LM_CHECKS, causal=FAST),
                expect=dict(config=dict(causal=True, norm_position="pre", final_norm=True, embedding_norm=False,
                                        tied_lm_head=True, hidden_act="gelu_new", intermediate_size=48,
                                        type_vocab_size=0, kv_head=(0, 1, 2, 3))),
                values_slice=lambda out: out[..., 2 * out.shape[-1] // 3:],
                refused=((dict(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"),)),
    "llama": Row("decoder", "LlamaConfig", dict(lm="LlamaForCausalLM"), LM, lengths=(11, 6, 3, 11), seed=3,
                 checks=LM_CHECKS, expect=dict(config=dict(LLAMA_CONFIG, attention_bias=False)),
                 holds=dict(config=lambda m, hf: m.config.attention_out_bias in (None, False)),
                 refused=((dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}),
                           "rope_type"),)),
    "qwen2": Row("decoder", "Qwen2Config", dict(lm="Qwen2ForCausalLM"), LM, lengths=(11, 6, 3, 11), seed=3,
                 checks=dict(LM_CHECKS, **{k: slow(DEC + f"test_check[llama-{k}]") for k in ("gates", "disabled")},
                             generate=slow(DEC + "test_generate_matches_hf[llama-1]")),
                 expect=dict(config=dict(LLAMA_CONFIG, attention_bias=True)),
                 holds=dict(config=lambda m, hf: m.config.attention_out_bias in (None, False))),
    # a window (4) shorter than the batch, soft-capping that bites (scores and logits capped at 2 and 3), head_dim
    # 16 ≠ D / H and query_pre_attn_scalar 12 ≠ head_dim
    "gemma2": Row("decoder", "Gemma2Config", dict(lm="Gemma2ForCausalLM"),
                  dict(LM, num_hidden_layers=4, head_dim=16, sliding_window=4, query_pre_attn_scalar=12,
                       attn_logit_softcapping=2.0, final_logit_softcapping=3.0),
                  lengths=(11, 6, 3, 11), seed=3, searches=(1,),
                  checks=dict(config=FAST, outputs=FAST, gates=FAST, disabled=FAST, generate=FAST),
                  expect=dict(config=dict(norm_offset=1.0, sublayer_post_norm=True, attention_softcap=2.0,
                                          logit_softcap=3.0, attention_radius=(3, 0, 3, 0), head_dim=16,
                                          tied_lm_head=True))),
}

KEEP = {"encoder": [[1, 0, 0, 1], [0, 1, 0, 0]], "decoder": [[1, 0], [0, 0], [0, 1]],
        "cross": [[0, 1], [1, 0], [1, 1]]}  # the main BART-layout cases: encoder 2 x 4 heads, decoder 3 x 2
BART_REFUSED = ((dict(static_position_embeddings=True), "static_position_embeddings"),
                (dict(extra_pos_embeddings=0), "extra_pos_embeddings"),
                (dict(tie_word_embeddings=False), "tie_word_embeddings"),
                (dict(activation_function="glu"), "activation_function"),
                (dict(forced_bos_token_id=[0, 1]), "forced_bos_token_id"))
MBART_TWIN = S2S + "test_check[mbart-cc25-{}]"
T5_TWIN = S2S + "test_check[t5-v1.1-{}]"
T5_CHECKS = dict(parity=FAST, default_mask=FAST, hidden_states=FAST, pre_ln_internals=FIRST, gates=FIRST,
                 disabled=FIRST, inputs_embeds=FIRST, refused=FAST, missing_tokenizer=FAST, round_trip=FAST,
                 export=FAST, export_refused=FAST, generate=FAST, cached_steps=FIRST, generate_gated=FIRST,
                 patch_heads=ONLY, analyze=slow(MBART_TWIN.format("analyze")), norms=slow(MBART_TWIN.format("norms")),
                 # > 30 s: its code path runs fast on a translation model in tests/test_api_shape.py
                 public_api=slow("tests/test_api_shape.py::test_norms_and_attributions_take_examples_or_a_batch_and_"
                                 "answer_per_type", only=True))
T5_REFUSED = ((dict(feed_forward_proj="gated-glu"), "feed_forward_proj"),
              (dict(feed_forward_proj="swiglu-relu"), "feed_forward_proj"),
              (dict(is_encoder_decoder=False), "is_encoder_decoder"),
              (dict(relative_attention_num_buckets=2), "relative_attention_num_buckets"),
              (dict(jattn_pruned_heads={"encoder": {"0": [0]}}), "jattn_pruned_heads"),
              (dict(forced_bos_token_id=[0, 1]), "forced_bos_token_id"))
POST_LN_ANALYSES = dict(
    statistics="tests/test_run_translation.py::test_translation_statistics_equal_per_example_loops",
    norms="tests/test_norms.py::test_seq2seq_all_attention_types_against_explicit_tensor",
    importance="tests/test_importance.py::test_translation_importance_equals_hf",
    pruning_curve="tests/test_importance.py::test_translation_curve_ranks_all_attention_types_together",
    bleu="tests/test_importance.py::test_bleu_metric_equals_sentence_by_sentence_decoding",
    l0="tests/test_gates.py::test_fold_gates_equals_interventions_seq2seq",
    lrp="tests/test_lrp.py::test_conservation_translation_model",
    view="tests/test_view.py::test_translation_page_teacher_forced",
    analyze_post_ln="tests/test_analyze_cli.py::test_analyze_cli_on_a_translation_model")
TWIN = "tests/test_seq2seq.py::"

SEQ2SEQ = {
    "marian": Row("encoder-decoder", "tiny_seq2seq", variants={"marian": {}},
                  checks=dict(parity=slow(TWIN + "test_parity_teacher_forced_padded"),
                              gates=slow(TWIN + "test_interventions_per_kind"),
                              disabled=slow(TWIN + "test_interventions_per_kind"))),
    "fsmt": Row("encoder-decoder", "tiny_seq2seq", variants={"fsmt": {}},
                checks=dict(parity=slow(TWIN + "test_parity_teacher_forced_padded"))),
    "bart": Row(
        "encoder-decoder", "tiny_bart", variants={"bart": {}, "bart-scaled": {}},
        checks=dict(parity=FAST, default_mask=FAST, embeddings=FAST, internals=slow(TWIN + "test_internals_complete"),
                    gates=slow(TWIN + "test_interventions_per_kind"),
                    disabled=slow(TWIN + "test_interventions_per_kind"),
                    inputs_embeds=slow(MBART_TWIN.format("inputs_embeds")), bare=ONLY, conversion=FAST,
                    refused=FAST, encoder_only=ONLY, round_trip=ONLY, export=ONLY,
                    pruned_export=slow(MBART_TWIN.format("pruned_export")),
                    generate=FIRST, generate_gated=FIRST,
                    cached_steps=slow("tests/test_decode.py::test_cached_steps_match_teacher_forcing"),
                    # every analysis that runs on the Marian model, run on BART (post-LN as Marian, BART differs in
                    # embeddings only): slow, their twins Marian's
                    **{check: slow(twin, only=True) for check, twin in POST_LN_ANALYSES.items()}),
        searches=SEARCHES[:3], gone=("model.decoder.layernorm_embedding.bias", "model.encoder.embed_positions.weight"),
        refused=((dict(normalize_before=True), "normalize_before"),
                 (dict(add_final_layer_norm=True), "add_final_layer_norm"), *BART_REFUSED),
        accepted=dict(normalize_before=False, add_final_layer_norm=False, normalize_embedding=True,
                      static_position_embeddings=False, extra_pos_embeddings=2)),
    "mbart": Row(
        "encoder-decoder", "tiny_mbart", variants={"mbart-cc25": {}, "mbart-50": {}},
        checks=dict(config=FAST, parity=FAST, default_mask=FAST, hidden_states=FAST, pre_ln_internals=FIRST,
                    gates=FIRST, disabled=FIRST, inputs_embeds=FIRST, bare=ONLY, conversion=FAST, refused=FAST,
                    missing_tokenizer=ONLY, round_trip=ONLY, export=ONLY, export_refused=ONLY, pruned_export=ONLY,
                    generate=FIRST, language=FIRST, analyze=ONLY, norms=ONLY,
                    cached_steps=slow(T5_TWIN.format("cached_steps")),
                    generate_gated=slow(T5_TWIN.format("generate_gated")),
                    patch_heads=slow(T5_TWIN.format("patch_heads"))),
        expect=dict(config=dict(norm_position="pre", final_norm=True, positions="learned", position_offset=2,
                                embedding_ln=True, final_logits_bias=True, tie_output=True, shared_embeddings=True,
                                decoder_mask="all")),
        searches=SEARCHES[:2], gone=("model.decoder.layer_norm.weight", "model.encoder.layernorm_embedding.bias"),
        refused=((dict(normalize_before=False), "normalize_before"),
                 (dict(add_final_layer_norm=False), "add_final_layer_norm"),
                 (dict(normalize_embedding=False), "normalize_embedding"), *BART_REFUSED,
                 (dict(decoder_start_token_id=None, bos_token_id=None), "decoder_start_token_id")),
        accepted=dict(normalize_before=True, add_final_layer_norm=True, normalize_embedding=True,
                      static_position_embeddings=False, extra_pos_embeddings=2),
        missing_tokenizer="tokenizer.json or sentencepiece.bpe.model", export_only="only mBART configs",
        language="fr_XX"),
    "m2m_100": Row(
        "encoder-decoder", "tiny_m2m_100", variants={"m2m_100": {}, "m2m_100-gelu": {}},
        checks=dict(config=FAST, parity=FAST, default_mask=FAST, hidden_states=FAST, bare=ONLY, refused=FAST,
                    pre_ln_internals=slow(MBART_TWIN.format("pre_ln_internals")),
                    gates=slow(MBART_TWIN.format("gates")), disabled=slow(MBART_TWIN.format("disabled")),
                    inputs_embeds=FIRST, missing_tokenizer=ONLY, round_trip=ONLY, export=ONLY,
                    pruned_export=slow(MBART_TWIN.format("pruned_export")), generate=FIRST,
                    language=slow(MBART_TWIN.format("language")),
                    cached_steps=slow(T5_TWIN.format("cached_steps")),
                    generate_gated=slow(T5_TWIN.format("generate_gated")),
                    analyze=slow(MBART_TWIN.format("analyze")), norms=slow(MBART_TWIN.format("norms")),
                    patch_heads=slow(T5_TWIN.format("patch_heads"))),
        expect=dict(config=dict(norm_position="pre", final_norm=True, positions="tensor2tensor", embedding_ln=False,
                                final_logits_bias=False, tie_output=True, shared_embeddings=True, decoder_mask="all")),
        searches=SEARCHES[:2], missing_tokenizer="tokenizer.json or sentencepiece.bpe.model", language="deu_Latn",
        refused=((dict(normalize_before=False), "normalize_before"),
                 (dict(add_final_layer_norm=False), "add_final_layer_norm"),
                 (dict(normalize_embedding=True), "normalize_embedding"),
                 (dict(tie_word_embeddings=False), "tie_word_embeddings"),
                 (dict(d_model=33, encoder_attention_heads=1, decoder_attention_heads=1), "even"),
                 (dict(activation_function="glu"), "activation_function"))),
    "t5": Row("encoder-decoder", "tiny_t5", variants={"t5-v1.1": {}, "t5-v1.0": {}}, checks=T5_CHECKS,
              searches=SEARCHES[:2], searched=SEARCHES[:3], refused=T5_REFUSED,
              missing_tokenizer="tokenizer.json or spiece.model",
              export_only="only T5 / mT5 configs"),
    # mT5 runs T5 v1.1's code (sizes and model_type differ): its checks beyond the teacher-forced ones are slow
    "mt5": Row("encoder-decoder", "tiny_t5", variants={"mt5": {}},
               checks={k: v if v.startswith("slow") or k in ("parity", "default_mask", "hidden_states", "refused",
                                                               "missing_tokenizer", "round_trip", "export",
                                                               "export_refused")
                       else slow(T5_TWIN.format(k)) for k, v in T5_CHECKS.items()},
               searched=SEARCHES[:3], refused=T5_REFUSED, missing_tokenizer="tokenizer.json or spiece.model",
               export_only="only T5 / mT5 configs"),
}

FAMILIES = {**ENCODERS, **DECODERS, **SEQ2SEQ}
