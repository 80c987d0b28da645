"""The artifact factory for generative recommenders: a GR version's five build stages
(stages.py) and the beam gates' decision (gates.py, pure: figures in, verdict out)."""
