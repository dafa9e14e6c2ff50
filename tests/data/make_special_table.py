"""Write ``special_table.csv``: 50-digit reference values of log C_d, A_d and 1 - A_d.

The reference does not use Bessel functions or any expansion that ``bayesvmf.special``
uses. It integrates the definition: under vMF(mu, kappa) on S^{d-1} the cosine
t = mu.x has density proportional to (1 - t^2)^((d-3)/2) exp(kappa t) on [-1, 1], so with
u = 1 - t and w(u) = (u (2 - u))^((d-3)/2) exp(-kappa u) on [0, 2],

    log C_d(kappa) = -log|S^{d-2}| - kappa - log int_0^2 w(u) du
    A_d(kappa)     = 1 - int u w(u) du / int w(u) du
    1 - A_d(kappa) = int u w(u) du / int w(u) du        (no subtraction)

computed with mpmath's tanh-sinh quadrature at 45 working digits, the interval split at
the mode of w and at multiples of its width so that sharp peaks (kappa, d up to 1e7,
1e5) are resolved. Each value is checked by a second quadrature at 55 digits with a
different split; the script stops if they disagree beyond 1e-25 (relative). At
moderate values it also cross-checks ``mpmath.besseli``.

Run from the project root (about an hour of CPU; rows are computed in parallel):

    python tests/data/make_special_table.py
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import os
from pathlib import Path

import mpmath as mp

DIMENSIONS = [2, 3, 4, 5, 10, 25, 41, 42, 43, 44, 100, 1000, 10_000, 100_000]
KAPPAS = [0, 1e-8, 1e-4, 0.01, 0.3, 1, 3, 10, 29.9, 30.1, 50, 100, 300, 1e3, 3e3, 1e4, 1e5,
          1e6, 1e7]  # fmt: skip
OUT = Path(__file__).with_name("special_table.csv")


def log_sphere_area(d):
    """log |S^{d-1}| = log 2 + (d/2) log pi - log Gamma(d/2)."""
    d = mp.mpf(d)
    return mp.log(2) + d / 2 * mp.log(mp.pi) - mp.loggamma(d / 2)


def integrals(d, kappa, spread):
    """(log int w, int u w / int w) over the polar angle, integrand scaled by its maximum.

    With t = cos(theta): int (1 - t^2)^((d-3)/2) e^(kappa t) dt = int_0^pi sin^(d-2)(theta)
    e^(kappa cos theta) dtheta, smooth for every d >= 2, and u = 1 - t = 2 sin^2(theta/2).
    """
    d = mp.mpf(d)
    kappa = mp.mpf(kappa)
    a = d - 2
    # mode of log w = a log sin(theta) - kappa (1 - cos theta): a cos(theta) = kappa sin^2(theta)
    if a > 0:
        c = (-a + mp.sqrt(a * a + 4 * kappa * kappa)) / (2 * kappa) if kappa > 0 else mp.mpf(0)
        mode = mp.acos(c)  # cos(mode) = c solves kappa c^2 + a c - kappa = 0
        curvature = a / mp.sin(mode) ** 2 + kappa * mp.cos(mode)
        log_peak = a * mp.log(mp.sin(mode)) - 2 * kappa * mp.sin(mode / 2) ** 2
    else:  # d = 2: the maximum is at theta = 0
        mode = mp.mpf(0)
        curvature = max(kappa, mp.mpf(1))
        log_peak = mp.mpf(0)
    width = 1 / mp.sqrt(curvature)
    points = {mp.mpf(0), +mp.pi, mode}
    for k in spread:
        for sign in (-1, 1):
            p = mode + sign * k * width
            if 0 < p < mp.pi:
                points.add(p)
    points = sorted(points)

    def w(theta):
        s = mp.sin(theta)
        if s <= 0:
            return mp.mpf(1) if (a == 0 and theta < 1) else mp.mpf(0) * s
        return mp.exp(a * mp.log(s) - 2 * kappa * mp.sin(theta / 2) ** 2 - log_peak)

    z0 = mp.quad(w, points)
    z1 = mp.quad(lambda theta: 2 * mp.sin(theta / 2) ** 2 * w(theta), points)
    return mp.log(z0) + log_peak, z1 / z0


def reference(d, kappa):
    """(log C_d(kappa), A_d(kappa), 1 - A_d(kappa)) at the current precision."""
    if kappa == 0:
        return -log_sphere_area(d), mp.mpf(0), mp.mpf(1)
    log_z, one_minus_a = integrals(d, kappa, spread=(0.5, 1, 2, 4, 8, 16, 32, 64))
    log_c = -log_sphere_area(d - 1) - mp.mpf(kappa) - log_z
    return log_c, 1 - one_minus_a, one_minus_a


def checked_reference(d, kappa):
    """Reference at 45 digits, confirmed by a 55-digit run with another split."""
    with mp.workdps(45):
        first = reference(d, kappa)
    with mp.workdps(55):
        if kappa == 0:
            second = first
        else:
            log_z, one_minus_a = integrals(d, kappa, spread=(0.25, 1.5, 3, 6, 12, 24, 48, 96))
            log_c = -log_sphere_area(d - 1) - mp.mpf(kappa) - log_z
            second = (log_c, 1 - one_minus_a, one_minus_a)
        for x, y in zip(first, second, strict=True):
            scale = max(abs(y), mp.mpf(1e-300))
            if abs(x - y) / scale > mp.mpf(1e-25):
                raise RuntimeError(f"quadratures disagree at d={d}, kappa={kappa}: {x} vs {y}")
        if 0 < kappa <= 300 and d <= 1000:  # where mpmath's Bessel series is quick
            nu = mp.mpf(d) / 2 - 1
            i0, i1 = mp.besseli(nu, kappa), mp.besseli(nu + 1, kappa)
            log_c = nu * mp.log(kappa) - (nu + 1) * mp.log(2 * mp.pi) - mp.log(i0)
            for x, y in ((first[0], log_c), (first[1], i1 / i0)):
                if abs(x - y) > mp.mpf(1e-30) * max(1, abs(y)):
                    raise RuntimeError(f"quadrature vs besseli at d={d}, kappa={kappa}")
    return first


def row(point):
    """One table row: d, kappa and the three values as 30-significant-digit strings."""
    d, kappa = point
    values = checked_reference(d, kappa)
    return [d, repr(kappa)] + [mp.nstr(v, 30, strip_zeros=False) for v in values]


def main():
    """Write the table, one row per (d, kappa), in parallel over the grid points."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dimensions", type=int, nargs="*", default=DIMENSIONS)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    args = parser.parse_args()
    grid = sorted({(d, float(k)) for d in args.dimensions for k in KAPPAS + [d / 2, d, 2 * d]})
    with multiprocessing.Pool(args.jobs) as pool:
        rows = []
        for values in pool.imap(row, grid):
            rows.append(values)
            print(*values, flush=True)
    with args.out.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["d", "kappa", "log_normalizer", "mean_resultant_length", "one_minus"])
        writer.writerows(rows)


if __name__ == "__main__":
    main()
