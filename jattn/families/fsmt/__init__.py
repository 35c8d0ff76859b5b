"""The FSMT family (fairseq WMT19; Ng et al. 2019)."""
