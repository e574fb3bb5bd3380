from reinforge.algos.losses.kl import KL_ESTIMATORS, k1, k2, k3, k3_kl, kl_penalty  # noqa: F401  (moved there)
