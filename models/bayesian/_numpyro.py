"""B-vMFmix (sec. 3.1 of [1]_) as a NumPyro program, with the labels z marginalised for NUTS.

pi ~ Dir(alpha), mu_k ~ vMF(mu0, C0), kappa_k ~ LogNormal(m, s2), x_i ~ sum_k pi_k
vMF(mu_k, kappa_k). The directions mu_k are sampled through
:func:`bayesvmf.distribution.unit_vector` (a vector of R^d normalised, whose direction has
the vMF prior and whose radius is a standard Gaussian's), so every latent lives in
unconstrained space and NUTS can sample the program; z is summed out by
``MixtureSameFamily``. It is the independent reference against which the collapsed Gibbs
sampler of ``_gibbs.py`` is tested (the kappa marginal).

References
----------
.. [1] S. Gopal and Y. Yang, "Von Mises-Fisher Clustering Models", ICML 2014, sec. 3.1.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from bayesvmf.distribution import VonMisesFisher, unit_vector

__all__ = ["bayesian_vmf_model"]


def bayesian_vmf_model(
    X, n_components: int, alpha, mu0, C0, m, s2, *, n_samples: int | None = None
) -> None:
    """NumPyro program of B-vMFmix with z marginalised (sec. 3.1 of [1]_).

    Sites: ``weights`` (pi, Dirichlet(alpha)), ``kappa`` (log-normal, plate ``component``),
    ``mu`` (deterministic unit vectors, from ``mu_normal`` by :func:`unit_vector`, whose
    marginal is vMF(mu0, C0)) and ``x``, a ``MixtureSameFamily`` of the K vMF components (the
    sum over z_i), observed as ``X``, or drawn when ``X`` is None (``numpyro.infer.Predictive``:
    draws from the prior, or posterior predictive draws given posterior samples).

    Parameters
    ----------
    X : array of shape (n, d) or None
        Unit rows; None to draw ``n_samples`` rows instead.
    n_components : int
        K.
    alpha : float
        Symmetric Dirichlet parameter of pi.
    mu0 : array of shape (d,)
        Unit mean direction of the prior on mu_k.
    C0 : float
        Concentration of the prior on mu_k (>= 0).
    m, s2 : float
        Mean and variance of log kappa_k.
    n_samples : int, optional
        Rows to draw when ``X`` is None (their dimension is that of ``mu0``); with ``X``
        given, None or ``len(X)``.

    Examples
    --------
    NUTS samples it as is, ``MCMC(NUTS(bayesian_vmf_model), ...).run(key, X, K, alpha, mu0,
    C0, m, s2)`` (``tests/test_bayesian_gibbs.py`` compares its kappa marginal with the
    collapsed Gibbs sampler's). Here, one draw from the prior and the log joint density there,
    each in one jitted program:

    >>> import jax, jax.numpy as jnp, numpy as np
    >>> from numpyro import handlers
    >>> from numpyro.infer.util import log_density
    >>> X = np.random.default_rng(0).normal(size=(40, 3))
    >>> X = jnp.asarray(X / np.linalg.norm(X, axis=1, keepdims=True))
    >>> args = (X, 2, 1.0, jnp.array([1.0, 0.0, 0.0]), 1.0, 3.0, 1.0)
    >>> def prior_draw(key):
    ...     trace = handlers.trace(handlers.seed(bayesian_vmf_model, key)).get_trace(*args)
    ...     return {name: trace[name]["value"] for name in ("weights", "kappa", "mu_normal")}
    >>> params = jax.jit(prior_draw)(jax.random.key(0))
    >>> params["kappa"].shape, params["mu_normal"].shape
    ((2,), (2, 3))
    >>> log_joint = jax.jit(lambda p: log_density(bayesian_vmf_model, args, {}, p)[0])(params)
    >>> bool(jnp.isfinite(log_joint))
    True

    With ``X=None`` it draws rows: from the prior, or given posterior samples (here the draw
    above, as a batch of one), the posterior predictive distribution:

    >>> from numpyro.infer import Predictive
    >>> samples = {name: value[None] for name, value in params.items()}
    >>> predictive = Predictive(bayesian_vmf_model, samples)
    >>> predictive(jax.random.key(1), None, *args[1:], n_samples=5)["x"].shape
    (1, 5, 3)
    """
    mu0 = jnp.asarray(mu0)
    d = mu0.shape[-1]
    if X is None:
        if n_samples is None:
            raise ValueError("n_samples is needed when X is None (the number of rows to draw)")
        n = n_samples
    else:
        n = X.shape[0]
        if X.shape[1] != d or n_samples not in (None, n):
            raise ValueError(
                f"X of shape {X.shape} does not match mu0 of dimension {d} and n_samples="
                f"{n_samples}"
            )
    weights = numpyro.sample("weights", dist.Dirichlet(jnp.full(n_components, alpha)))
    with numpyro.plate("component", n_components):
        kappa = numpyro.sample("kappa", dist.LogNormal(m, jnp.sqrt(s2)))
        mu = unit_vector("mu", d, prior=VonMisesFisher(mu0, C0))
    mixture = dist.MixtureSameFamily(dist.Categorical(probs=weights), VonMisesFisher(mu, kappa))
    with numpyro.plate("obs", n):
        numpyro.sample("x", mixture, obs=X)
