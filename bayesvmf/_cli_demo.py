"""The ``bayesvmf demo`` command: every model of the package on built-in data.

Each section fits one model on scikit-learn's digits (or on a small synthetic problem) and
says, in plain words, what it fitted, one or two numbers computed on the spot and its wall
time. Nearly all of the time is XLA compiling each model once; the estimators' own
compilation cache (:func:`bayesvmf._compile_cache.compilation_cache`, in ``cache_dir()/jax``
unless :func:`bayesvmf.set_compilation_cache` says otherwise) keeps the compiled programs
for the next run, and the demo runs inside one such block, so that what it compiles outside
the estimators (the distribution's sampler) is kept too. Re-exported by
:mod:`bayesvmf.cli`, whose ``main`` dispatches to :func:`demo`.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from pathlib import Path

from bayesvmf._cli_models import _say
from bayesvmf._compile_cache import compilation_cache


@dataclasses.dataclass
class _DemoContext:
    """What the demo sections share: the options, the digits split, earlier results."""

    seed: int
    num_samples: int
    results: dict = dataclasses.field(default_factory=dict)

    @functools.cached_property
    def digits(self):
        """scikit-learn's digits as unit vectors, split 1200 / 597 rows at random."""
        import numpy as np

        from bayesvmf.datasets import load_digits_directional

        digits = load_digits_directional()
        order = np.random.default_rng(self.seed).permutation(digits.X.shape[0])
        train, test = order[:1200], order[1200:]
        return digits, digits.X[train], digits.X[test], digits.y[test]


def _demo_nuts(ctx: _DemoContext) -> dict:
    """Draw from the vMF distribution, evaluate it at extreme arguments, run NUTS on kappa."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    import numpyro.distributions as dist
    from numpyro.diagnostics import summary
    from numpyro.infer import MCMC, NUTS

    from bayesvmf import VonMisesFisher, special

    d, true_kappa = 50, 60.0
    mu = jnp.zeros(d).at[0].set(1.0)
    X = VonMisesFisher(mu, true_kappa).sample(jax.random.key(ctx.seed), (200,))
    cosines = np.asarray(X @ mu)
    _say(
        f"   drew 200 unit vectors from vMF(mu = e1, kappa = {true_kappa:.0f}) in d = {d}: "
        f"cosines to mu between {cosines.min():.3f} and {cosines.max():.3f}"
    )
    sharp = VonMisesFisher(jnp.zeros(100_000).at[0].set(1.0), 1e6)
    _say(
        "   d = 100,000, kappa = 1e6 (I_nu(kappa) overflows double precision there):"
        f" log C_d = {float(special.log_vmf_normalizer(100_000, 1e6)):.3f},"
        f" A_d = {float(special.mean_resultant_length(100_000, 1e6)):.6f},"
        f" entropy = {float(sharp.entropy()):.1f}"
    )

    def model(X):
        kappa = numpyro.sample("kappa", dist.LogNormal(jnp.log(10.0), 2.0))
        numpyro.sample("x", VonMisesFisher(mu, kappa), obs=X)

    mcmc = MCMC(
        NUTS(model),
        num_warmup=ctx.num_samples,
        num_samples=ctx.num_samples,
        num_chains=2,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(ctx.seed), X)
    stats = summary(mcmc.get_samples(group_by_chain=True), prob=0.95)["kappa"]
    low, high = float(stats["2.5%"]), float(stats["97.5%"])
    inside = "inside" if low <= true_kappa <= high else "OUTSIDE"
    _say(
        f"   NUTS on kappa (2 chains x {ctx.num_samples} draws): posterior mean "
        f"{float(stats['mean']):.2f}, 95% interval [{low:.2f}, {high:.2f}] ({inside}: true "
        f"{true_kappa:.0f}), R-hat {float(stats['r_hat']):.3f}, ESS {float(stats['n_eff']):.0f}"
    )
    return {"kappa_inside": low <= true_kappa <= high, "rhat": float(stats["r_hat"])}


def _demo_sparse(ctx: _DemoContext) -> dict:
    """Follow the beta path on the digits; score its dense (classical) and BIC points."""
    from bayesvmf import metrics
    from bayesvmf.models import SparseVMFMixture

    _, X_train, X_test, y_test = ctx.digits
    model = SparseVMFMixture(10, n_init=4, max_iter=200, random_state=ctx.seed)
    path = model.path(X_train, max_steps=5)
    dense, best = path.model_at(0), path.best("bic")
    result = {
        "classical_ari": metrics.adjusted_rand(y_test, dense.predict(X_test)),
        "classical_loglik": metrics.held_out_log_likelihood(dense, X_test),
        "sparse_ari": metrics.adjusted_rand(y_test, best.predict(X_test)),
    }
    _say(
        f"   beta path on the digits (1200 training images, K = 10): {len(path)} points, "
        f"sparsity of the means {path.sparsity[0]:.3f} -> {path.sparsity[-1]:.3f}"
    )
    _say(
        f"   beta = 0 (the classical vMF mixture): ARI {result['classical_ari']:.3f} against the "
        f"digit labels of the 597 test images, held-out log-likelihood "
        f"{result['classical_loglik']:.3f} per image"
    )
    _say(
        f"   BIC picks beta = {best.beta:.3g} (sparsity {best.sparsity_:.3f}): test ARI "
        f"{result['sparse_ari']:.3f}"
    )
    return result


def _demo_bayesian(ctx: _DemoContext) -> dict:
    """Fit B-vMFmix by VI on the digits and by collapsed Gibbs on 90 of them."""
    import numpy as np

    from bayesvmf import metrics
    from bayesvmf.models import BayesianVMFMixture

    digits, X_train, X_test, y_test = ctx.digits
    vi = BayesianVMFMixture(10, kappa_update="bounding", max_iter=100, random_state=ctx.seed)
    vi.fit(X_train)
    loglik = metrics.held_out_log_likelihood(vi, X_test)
    ari = metrics.adjusted_rand(y_test, vi.predict(X_test))
    classical_loglik = ctx.results["sparse"]["classical_loglik"]
    better = "higher" if loglik > classical_loglik else "lower"
    _say(
        f"   VI (kappa bounded) on the same 1200 images: {vi.n_iter_} iterations, test ARI "
        f"{ari:.3f}, held-out log-likelihood {loglik:.3f} per image ({better} than the "
        f"classical mixture by {abs(loglik - classical_loglik):.3f})"
    )
    # a tiny problem for the collapsed Gibbs sampler: 30 images each of the digits 0, 1, 4
    rows = np.concatenate([np.flatnonzero(digits.y == c)[:30] for c in (0, 1, 4)])
    gibbs = BayesianVMFMixture(
        3, inference="gibbs", num_chains=2, num_warmup=100, num_samples=100, random_state=ctx.seed
    ).fit(digits.X[rows])
    gibbs_ari = metrics.adjusted_rand(digits.y[rows], gibbs.predict(digits.X[rows]))
    rhat = float(np.max(gibbs.rhat_kappa_))
    _say(
        f"   collapsed Gibbs on 90 images of 0, 1, 4 (2 chains x 100 sweeps): largest split "
        f"R-hat of kappa {rhat:.3f}, ARI {gibbs_ari:.3f}"
    )
    return {"vi_ari": ari, "vi_loglik": loglik, "gibbs_rhat": rhat, "gibbs_ari": gibbs_ari}


def _demo_hierarchical(ctx: _DemoContext) -> dict:
    """Fit H-vMFmix with two top-level nodes of five leaves on the digits."""
    import numpy as np

    from bayesvmf import metrics
    from bayesvmf.models import HierarchicalVMFMixture, balanced_tree

    _, X_train, X_test, y_test = ctx.digits
    tree = HierarchicalVMFMixture(
        balanced_tree((2, 5)),
        kappa_update="bounding",
        max_iter=100,
        tol=1e-4,
        random_state=ctx.seed,
    ).fit(X_train)
    ari = metrics.adjusted_rand(y_test, tree.predict(X_test))
    loglik = metrics.held_out_log_likelihood(tree, X_test)
    _say(
        f"   a tree root > 2 nodes > 5 leaves each on the 1200 images: test ARI {ari:.3f}, "
        f"held-out log-likelihood {loglik:.3f} per image"
    )
    branch = tree.predict_path(X_test)[:, 1]
    groups = []
    for node in np.unique(branch):
        counts = np.bincount(y_test[branch == node], minlength=10)
        groups.append("".join(str(c) for c in np.flatnonzero(counts >= 0.5 * counts.max())))
    _say(f"   the most frequent digits under each top-level node: {', '.join(groups)}")
    return {"ari": ari, "loglik": loglik}


def _demo_temporal(ctx: _DemoContext) -> dict:
    """Score T-vMFmix's forecast of drifting clusters against B-vMFmix's fixed means.

    (A T-vMFmix with C0 = 1e6 is no fixed-means baseline: C0 also ties every component's
    first mean to the shared mu_{-1}, so its three components fit one direction, which
    the coincidence guard reports.)
    """
    from bayesvmf.datasets import make_temporal_vmf_mixture
    from bayesvmf.models import BayesianVMFMixture, TemporalVMFMixture

    n_times = 6
    X, times, _, _ = make_temporal_vmf_mixture(
        40,
        n_features=8,
        n_components=3,
        n_times=n_times,
        kappa=50.0,
        drift=100.0,
        random_state=ctx.seed,
    )
    past, last = times < n_times - 1, times == n_times - 1
    settings = dict(kappa_update="bounding", max_iter=300, tol=1e-4, random_state=ctx.seed)
    drifting = TemporalVMFMixture(3, C0=100.0, **settings).fit(X[past], times[past])
    fixed = BayesianVMFMixture(3, **settings).fit(X[past])
    scores = {
        "drifting": drifting.score(X[last], times[last]),
        "fixed": fixed.score(X[last]),
    }
    _say(
        f"   {int(past.sum())} rows over {n_times - 1} time steps from 3 drifting vMF clusters "
        f"in d = 8; score of the next step's {int(last.sum())} rows (forecast):"
    )
    _say(
        f"   drifting means (T-vMFmix, C0 = 100) {scores['drifting']:.3f} per row, fixed means "
        f"(B-vMFmix) {scores['fixed']:.3f} per row"
    )
    return scores


def _demo_dirichlet(ctx: _DemoContext) -> dict:
    """Fit the Dirichlet-vMF mixture to sets of digit images."""
    import numpy as np

    from bayesvmf import metrics
    from bayesvmf.models import DirichletVMFMixture

    digits = ctx.digits[0]
    rng = np.random.default_rng(ctx.seed)
    by_digit = [np.flatnonzero(digits.y == c) for c in range(10)]
    docs, main = [], []
    for _ in range(120):  # a set = 9 images of its main digit and 3 of another digit
        a, b = rng.choice(10, 2, replace=False)
        rows = np.concatenate([rng.choice(by_digit[a], 9), rng.choice(by_digit[b], 3)])
        docs.append(digits.X[rows])
        main.append(a)
    main = np.asarray(main)
    model = DirichletVMFMixture(10, n_init=2, max_iter=100, random_state=ctx.seed).fit(docs[:80])
    dominant = model.transform(docs[80:]).argmax(axis=1)
    nmi = metrics.normalized_mutual_info(main[80:], dominant)
    _say(
        f"   120 sets of 12 digit images (9 of a main digit, 3 of another); 10 topics fitted "
        f"on 80 sets in {model.n_iter_} iterations"
    )
    _say(f"   dominant topic of the 40 held-out sets against their main digit: NMI {nmi:.3f}")
    return {"nmi": nmi}


def _demo_kmle(ctx: _DemoContext) -> dict:
    """Cluster random Wishart matrices by k-MLE, K chosen by DP-k-MLE++."""
    import numpy as np
    import scipy.stats

    from bayesvmf import metrics
    from bayesvmf.models import KMLEMixture

    scales = [
        np.eye(3),
        np.diag([6.0, 1.0, 0.2]),
        np.array([[3.0, 2.5, 0.0], [2.5, 3.0, 0.0], [0.0, 0.0, 3.0]]),
    ]
    rng = np.random.default_rng(ctx.seed)
    X = np.concatenate([scipy.stats.wishart(15, S).rvs(100, random_state=rng) for S in scales])
    y = np.repeat(np.arange(3), 100)
    model = KMLEMixture(random_state=ctx.seed).fit(X)
    ari = metrics.adjusted_rand(y, model.labels_)
    _say(
        "   300 random 3 x 3 SPD matrices from three Wishart distributions (dof 15); "
        f"DP-k-MLE++ chose K = {model.n_components_}, k-MLE made {model.n_transfers_} "
        f"Hartigan transfers: ARI {ari:.3f}"
    )
    return {"k": model.n_components_, "ari": ari}


#: The sections of ``bayesvmf demo``, in order: name -> (title, function of the context).
DEMO_SECTIONS: dict[str, tuple[str, Callable[[_DemoContext], dict]]] = {
    "nuts": ("the vMF distribution and NUTS on kappa (NumPyro)", _demo_nuts),
    "sparse": ("SparseVMFMixture: the l1 beta path (Barbaro & Rossi)", _demo_sparse),
    "bayesian": (
        "BayesianVMFMixture: B-vMFmix by VI and by collapsed Gibbs (Gopal & Yang)",
        _demo_bayesian,
    ),
    "hierarchical": (
        "HierarchicalVMFMixture: H-vMFmix on a tree (Gopal & Yang)",
        _demo_hierarchical,
    ),
    "temporal": (
        "TemporalVMFMixture: T-vMFmix, means drifting over time (Gopal & Yang)",
        _demo_temporal,
    ),
    "dirichlet": ("DirichletVMFMixture: topics of sets of vectors (Li)", _demo_dirichlet),
    "kmle": ("KMLEMixture: a Wishart mixture by k-MLE (Saint-Jean & Nielsen)", _demo_kmle),
}


def demo(seed: int = 0, num_samples: int = 200, cache: bool = True) -> dict:
    """Fit every model of bayesvmf on built-in data and say what came out.

    Every section prints what it fitted, one or two numbers computed on the spot and its
    wall time; the returned dict holds those numbers by section name. With ``cache``, the
    compiled programs are kept on disk (:func:`bayesvmf.set_compilation_cache`) for the
    next run; JAX's configuration is restored afterwards. ``cache=False`` turns the cache
    off for every estimator the demo fits.
    """
    with compilation_cache(None if cache else False) as folder:
        return _run_demo(seed, num_samples, folder)


def _run_demo(seed: int, num_samples: int, folder: Path | None) -> dict:
    import warnings

    start = time.perf_counter()
    _say("bayesvmf demo: every model on built-in data (float64, CPU)")
    _say(
        "most of the time below is XLA compiling each model once; "
        + (
            f"compiled programs are kept in {folder}, so the next run is faster"
            if folder is not None
            else "the compilation cache is off"
        )
    )
    import jax

    ctx = _DemoContext(seed, num_samples)
    for number, (name, (title, section)) in enumerate(DEMO_SECTIONS.items(), start=1):
        _say(f"\n[{number}/{len(DEMO_SECTIONS)}] {title}")
        began = time.perf_counter()
        with jax.enable_x64(True), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # shown as plain lines of the section
            ctx.results[name] = section(ctx)
        for warning in caught:
            _say(f"   warning: {warning.message}")
        seconds = time.perf_counter() - began
        ctx.results[name]["seconds"] = seconds
        _say(f"   ({seconds:.1f} s)")
    _say(f"\nDone: {len(DEMO_SECTIONS)} sections in {time.perf_counter() - start:.1f} s.")
    return ctx.results
