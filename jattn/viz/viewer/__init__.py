"""Assets of the attention viewer page (inlined by jattn.viz.view)."""
