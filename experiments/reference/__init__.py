"""The in-tree reference CTR model, its synthetic click log and its training loop.

Used by the demo, the tests and the artifact benchmark: 13 dense + 26 hashed
categorical features, per-feature embeddings, a DCN-v2 (or DeepFM) interaction and an
MLP; a click-log generator whose labels come from a hidden logistic teacher, so AUC
is meaningfully above 0.5 and two trained versions differ.
"""
