r"""Degeneracy diagnosis of VMFMix [1]_ topics (:mod:`bayesvmf._guards` applied to word types).

A topic of VMFMix is *carried by one word type* when its expected counts sit on one distinct
vector: the tokens of a frequent word ("said", "mln") are many rows of the flat corpus but
one point of the sphere, and a topic centred on them has an unbounded density (its kappa
runs to the cap). The effective number of rows of :func:`bayesvmf._guards.effective_counts`
is therefore taken over the *expected counts per word type*, sum_{ij: x_ij = v} w_ij pi_ijk
for each distinct vector v, not over the tokens (a topic on 10,000 tokens of one word type
has 10,000 effective tokens but one effective word type).

Collapsed topics are diagnosed, not reseeded during the fit. Reseeding was measured on the
Classic3 word vectors of benchmarks/bench_dirichlet.py (K = 30, per-topic kappa, the four
restarts of ``random_state=0``): three restarts never reached the cap; the fourth collapsed
one topic (macro-F1 0.9825); moving that topic, when it hit the cap, to a vector drawn by
its distance to the other topics with the others' median kappa left a healthy run
(macro-F1 0.9834, bound 27.72M against 28.11M collapsed), below the best healthy restart
that :func:`bayesvmf._guards.select_run` keeps anyway (0.9854). With ``shared_kappa=True``
(the default) no restart collapsed. A reseed also breaks the monotone bound of VEM, so it
was left out.

References
----------
.. [1] S. Li, "Dirichlet-vMF Mixture Model", arXiv:1702.07495 (2017).
"""

from __future__ import annotations

import jax
import numpy as np
import scipy.sparse as sp
from scipy.special import digamma, logsumexp

from bayesvmf import _guards, special


def advice(shared_kappa: bool) -> str:
    """Return what the warning of :class:`DirichletVMFMixture` advises (not what is set)."""
    tries = "fewer topics or a lower kappa_max"
    if not shared_kappa:
        tries = "shared_kappa=True (one concentration for all topics), " + tries
    return (
        "Topics collapsed onto single word types or a near-uniform background topic make poor "
        f"document features: try {tries}."
    )


def word_types(X) -> tuple[np.ndarray, int]:
    """Return the distinct-vector id of every row of ``X`` and the number of distinct vectors.

    Rows are compared bit for bit (the same word's vector in two documents is one type).
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    rows = X.view(np.dtype((np.void, X.dtype.itemsize * X.shape[1]))).reshape(-1)
    _, type_id = np.unique(rows, return_inverse=True)
    type_id = type_id.reshape(-1)
    return type_id, int(type_id.max()) + 1 if type_id.size else 0


def type_counts(X, w, offsets, phi, mu, kappa, type_id, n_types: int) -> np.ndarray:
    """Return the expected count of each word type in each topic, shape (n_types, K).

    The responsibilities pi_ijk of eq. (9) of [1]_ (first line) at q(theta_i) = Dir(phi_i)
    and the topics (mu, kappa), weighted by w_ij and summed over the rows of each type.
    Computed on the host in NumPy (one pass, after a fit): nothing here feeds back into
    the fit.
    """
    X = np.asarray(X, dtype=np.float64)
    mu = np.asarray(mu, dtype=np.float64)
    kappa = np.asarray(kappa, dtype=np.float64)
    doc = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    with jax.enable_x64(True):  # the normalisers in float64 (the numerics contract)
        log_c = np.asarray(special.log_vmf_normalizer(X.shape[1], kappa))
    logits = digamma(np.asarray(phi, dtype=np.float64))[doc] + log_c + kappa * (X @ mu.T)
    resp = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
    by_type = sp.csr_matrix(
        (np.asarray(w, dtype=np.float64), (type_id, np.arange(X.shape[0]))),
        shape=(n_types, X.shape[0]),
    )
    return np.asarray(by_type @ resp)


def token_type_counts(X, counts, z, n_topics: int) -> np.ndarray:
    """Return the count of each word type in each topic from the topics ``z`` of the tokens.

    The tokens are the rows of ``X`` repeated by their whole-number ``counts`` (the collapsed
    Gibbs sampler's layout); shape (n_types, n_topics).
    """
    type_id, n_types = word_types(X)
    tokens = np.repeat(type_id, counts)
    per_type = np.zeros((n_types, n_topics))
    np.add.at(per_type, (tokens, np.asarray(z)), 1.0)
    return per_type


def diagnose(
    counts, n_tokens: float, kappa, kappa_max: float, per_type=None, mean_directions=None
) -> _guards.Diagnosis:
    """Diagnose topics from their weights n_k, concentrations and expected counts per type.

    Empty (less than one token's weight), collapsed (kappa at ``kappa_max``), carried by one
    word type (effective number of types below 1.5, from ``per_type``), near-uniform
    background topics and, with ``mean_directions`` (K, d), topics that coincide with an
    earlier one (:func:`bayesvmf._guards.diagnose`).
    """
    effective = None if per_type is None else _guards.effective_counts(per_type)
    return _guards.diagnose(
        counts,
        n_rows=n_tokens,
        kappa=kappa,
        kappa_max=kappa_max,
        effective_rows=effective,
        mean_directions=mean_directions,
    )
