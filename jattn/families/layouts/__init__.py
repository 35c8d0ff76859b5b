"""Key tables shared by several families, named by the layout of their checkpoints: a family's
``convert.py`` (or ``spec.py``) imports a layout, never another family.

    post_ln_encoder   BERT's block names and heads (BERT, RoBERTa; read under their own keys by
                      ALBERT, DeBERTa-v2, DistilBERT, ELECTRA, MPNet, RoBERTa-PreLayerNorm, XLM-R)
    seq2seq           Marian's and BART's block names (Marian, FSMT, BART, mBART, M2M100)
    rotary_decoder    Llama's config mapping and key table (Llama, Qwen2, Gemma 2)
"""
