"""The Marian family (Opus-MT; Junczys-Dowmunt et al. 2018)."""
