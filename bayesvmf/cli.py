"""The ``bayesvmf`` command line.

``bayesvmf demo`` runs the package end to end on data it generates and says, in plain
words, what it did and what came out. It is the first command a newcomer runs (README).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence


def _say(text: str = "") -> None:
    print(text, flush=True)


def _demo_distribution(seed: int):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bayesvmf import VonMisesFisher, make_vmf_mixture, special

    _say("1. Synthetic directional data (the simulation protocol of Barbaro & Rossi, sec. 4.1)")
    data = make_vmf_mixture(600, 50, 3, kappa=40.0, random_state=seed)
    counts = np.bincount(data.labels, minlength=3)
    _say(
        f"   drew {data.X.shape[0]} unit vectors in d = {data.X.shape[1]} from 3 vMF components"
        f" (sizes {counts.tolist()}), maximally separated means"
        f" (largest pairwise cosine {_largest_cosine(data.mean_directions):.3f}),"
        f" kappa after the separability adjustment = {_numbers(data.concentrations, 1)}"
    )

    _say("\n2. The vMF distribution (a numpyro Distribution)")
    mu = jnp.asarray(data.mean_directions[0])
    dist = VonMisesFisher(mu, jnp.asarray(data.concentrations[0]))
    draws = dist.sample(jax.random.key(seed), (5,))
    _say(f"   5 draws from component 0: cosines to its mean {_numbers(draws @ mu, 3)}")
    log_density = dist.log_prob(jnp.asarray(data.X[:3]))
    _say(f"   log-densities of the first 3 data rows: {_numbers(log_density, 2)}")
    e1 = jnp.zeros(100_000).at[0].set(1.0)
    sharp = VonMisesFisher(e1, 1e6)
    _say(
        "   at d = 100,000 and kappa = 1e6 (where I_nu(kappa) overflows double precision):"
        f" log C_d(kappa) = {float(special.log_vmf_normalizer(100_000, 1e6)):.6f},"
        f" A_d(kappa) = {float(special.mean_resultant_length(100_000, 1e6)):.12f},"
        f" entropy = {float(sharp.entropy()):.3f}"
    )
    return data


def _numbers(values, digits: int) -> str:
    """Format an array of numbers as [a, b, ...] with a fixed number of decimals."""
    return "[" + ", ".join(f"{float(v):.{digits}f}" for v in values) + "]"


def _largest_cosine(mean_directions) -> float:
    import numpy as np

    gram = mean_directions @ mean_directions.T
    np.fill_diagonal(gram, -np.inf)
    return float(gram.max())


def _demo_nuts(data, seed: int, num_samples: int) -> None:
    import arviz as az
    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    from bayesvmf import VonMisesFisher

    component = data.labels == 0
    X = jnp.asarray(data.X[component])
    mu = jnp.asarray(data.mean_directions[0])
    true_kappa = float(data.concentrations[0])

    def model(X):
        kappa = numpyro.sample("kappa", dist.LogNormal(jnp.log(10.0), 2.0))
        numpyro.sample("x", VonMisesFisher(mu, kappa), obs=X)

    _say(f"\n3. NUTS on kappa for component 0 ({int(component.sum())} points, mean known)")
    mcmc = MCMC(
        NUTS(model),
        num_warmup=num_samples,
        num_samples=num_samples,
        num_chains=2,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(seed), X)
    posterior = az.from_numpyro(mcmc)
    summary = az.summary(posterior, var_names=["kappa"], round_to=3)
    for line in summary.to_string().splitlines():
        _say("   " + line)
    draws = np.asarray(mcmc.get_samples()["kappa"])
    low, high = np.quantile(draws, [0.025, 0.975])
    inside = "inside" if low <= true_kappa <= high else "OUTSIDE"
    _say(
        f"   true kappa {true_kappa:.2f} is {inside} the 95% posterior interval"
        f" [{low:.2f}, {high:.2f}]"
    )


def demo(seed: int = 0, num_samples: int = 300) -> None:
    """Run every part of bayesvmf on generated data and explain what happened."""
    import jax

    start = time.perf_counter()
    _say("bayesvmf demo: von Mises-Fisher models on JAX and NumPyro (float64, CPU)\n")
    with jax.enable_x64(True):
        data = _demo_distribution(seed)
        _demo_nuts(data, seed, num_samples)
    _say(f"\nDone in {time.perf_counter() - start:.1f} s.")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bayesvmf`` console script."""
    parser = argparse.ArgumentParser(
        prog="bayesvmf",
        description="Bayesian and penalised von Mises-Fisher mixture models.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo_parser = commands.add_parser("demo", help="run the package end to end on generated data")
    demo_parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo_parser.add_argument(
        "--num-samples", type=int, default=300, help="NUTS warm-up and draws per chain"
    )
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "demo":
        if args.num_samples < 10:
            parser.error(f"--num-samples must be at least 10, got {args.num_samples}")
        demo(seed=args.seed, num_samples=args.num_samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
