"""Predictions on rows padded to a few bucket sizes (BaseVMFMixture._prediction_log_prob)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from scipy.special import logsumexp

from bayesvmf import _data, _mixture
from bayesvmf.models import SparseVMFMixture


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(3)
    X = np.abs(rng.normal(size=(150, 5)))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    # float64 products: the reference below is the float64 program on the unpadded rows
    # (the default dtype="mixed" would differ from it at float32 rounding, not by padding)
    model = SparseVMFMixture(2, n_init=1, max_iter=200, dtype="float64", random_state=0)
    return model.fit(X), X


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_sizes_of_one_bucket_share_a_program_and_equal_the_unpadded_rows(fitted, sparse):
    model, X = fitted
    X = scipy.sparse.csr_matrix(X) if sparse else X
    model.score_samples(X[:100])  # bucket 128
    traces = _mixture.TRACE_COUNTS.get("weighted_log_prob", 0)
    for n in (101, 113, 127):
        labels, proba = model.predict(X[:n]), model.predict_proba(X[:n])
        scores = model.score_samples(X[:n])
        assert labels.shape == (n,) and proba.shape == (n, 2) and scores.shape == (n,)
        with jax.enable_x64(True):
            wlp = np.asarray(
                _mixture._weighted_log_prob(
                    _data.to_device(X[:n]),
                    jnp.asarray(model.weights_),  # the program takes the log itself
                    jnp.asarray(model.mean_directions_),
                    jnp.asarray(model.concentrations_),
                )
            )
        np.testing.assert_allclose(scores, logsumexp(wlp, axis=1), rtol=1e-13)
        np.testing.assert_array_equal(labels, np.argmax(wlp, axis=1))
        np.testing.assert_allclose(proba, np.exp(wlp - logsumexp(wlp, axis=1)[:, None]))
    # one more trace: the unpadded reference above (one per n), none for the predictions
    assert _mixture.TRACE_COUNTS["weighted_log_prob"] - traces == 3
