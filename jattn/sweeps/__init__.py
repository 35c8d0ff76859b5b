"""Sweeps: programs of interventions over the runner (head importance, disabling, pruning)."""
