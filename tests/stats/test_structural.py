"""The structural fit against second computations: scipy's DCT, the exact restricted likelihood of the error
contrasts (where the cosines diagonalise the model exactly), and the model's covariances summed by hand."""

import numpy as np
import pytest
from scipy import fft
from scipy.linalg import null_space

from pipelines.stats import structural
from pipelines.stats.simulate import Structure, simulate


def test_cosine_transform_is_scipys_orthonormal_dct_without_its_constant_term():
    values = np.random.default_rng(1).standard_normal((3, 17))
    expected = fft.dct(values, type=2, norm="ortho", axis=1)[:, 1:]
    assert values @ structural.cosine_basis(17).T == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("degree", [0, 2])
def test_likelihood_is_the_exact_restricted_likelihood_of_a_walk_plus_noise(degree):
    # A walk from the start plus white noise: the cosines diagonalise its demeaned covariance exactly, so the
    # likelihood must be REML's −½[(T − p) log σ̂² + log|K'ΣK|] on contrasts K orthogonal to the trend, up to a
    # constant; K'ΣK and σ̂² written from the time-domain covariance.
    size = 30
    values = simulate(np.random.default_rng(2), Structure(epochs=size, walk_sd=0.01), 2)[0]
    steps = np.arange(size)
    contrasts = null_space(np.vander(np.linspace(-1, 1, size), degree + 1).T)
    walk_covariance = np.minimum.outer(steps, steps) + 1.0

    def direct(noise: float, walk: float) -> np.ndarray:
        covariance = contrasts.T @ (noise * np.eye(size) + walk * walk_covariance) @ contrasts
        projected = values @ contrasts
        scale = np.einsum("ij,jk,ik->i", projected, np.linalg.inv(covariance), projected) / contrasts.shape[1]
        return -0.5 * (contrasts.shape[1] * np.log(scale) + np.linalg.slogdet(covariance)[1])

    points = structural.grid()
    white = np.flatnonzero((points[:, 0] == 0) & np.isin(points[:, 2], [0.0, 0.003, 0.1]))
    ours = structural.log_likelihoods(values, degree)[0][:, white]
    theirs = np.stack([direct(1.0, points[index, 2]) for index in white], axis=1)
    assert ours - ours[:, :1] == pytest.approx(theirs - theirs[:, :1], rel=1e-8, abs=1e-8)


def test_mean_variance_is_the_double_sum_of_the_models_covariances():
    # AR(1) φ 0.8 of variance 1, white noise 0.4, a walk of step variance 0.01 that started 5 epochs before these 12;
    # the mean of the last 4 of them
    phi, noise, walk, before, size, n = 0.8, 0.4, 0.01, 5, 12, 4
    steps = np.arange(size)
    covariance = phi ** np.abs(np.subtract.outer(steps, steps)) + noise * np.eye(size)
    covariance += walk * (np.minimum.outer(steps, steps) + 1 + before)
    weights = np.r_[np.zeros(size - n), np.full(n, 1 / n)]
    got = structural.mean_variance_units(np.array([phi, noise, walk]), n, before + size - n)
    assert got == pytest.approx(weights @ covariance @ weights, rel=1e-12)
    assert structural.mean_variance_units(np.array([0.0, 0.0, 0.0]), n, 0) == pytest.approx(1 / n)


def test_fit_takes_the_best_grid_point_and_at_most_t_over_n_plus_one_less_the_trend_degrees_of_freedom():
    values = simulate(np.random.default_rng(3), Structure(phi=0.95), 20)[0]
    for degree, walk in ((0, True), (2, False)):
        fitted = structural.fit(values, 50, degree, walk=walk)
        likelihoods, scales = structural.log_likelihoods(values, degree, walk)
        best = [int(np.argmax(row)) for row in likelihoods]
        points = structural.grid(walk)[best]
        assert list(fitted["phi"]) == list(points[:, 0])
        units = structural.mean_variance_units(points, 50, 150)
        assert fitted["variance"] == pytest.approx(scales[np.arange(20), best] * units, rel=1e-12)
        assert fitted["df"].max() <= 200 / 50 + 1 - degree and fitted["df"].min() >= 1
    assert not structural.fit(values, 50, 2, walk=False)["walk"].any()


def test_a_constant_series_has_no_spread():
    fitted = structural.fit(np.full((1, 60), 0.25), 20, 0)
    assert fitted["variance"][0] == 0 and fitted["effective_n"][0] == 20


def test_a_dominant_walk_is_found_and_its_variance_counted_from_the_start():
    # A pure random walk (step sd 0.02) and little noise: most fits take a walk, and the window mean's variance
    # around the start is about step² · (mean position of the window) = 4e-4 · 175.
    values = simulate(np.random.default_rng(4), Structure(phi=0.0, drift_sd=0.0, noise_sd=0.005, walk_sd=0.02), 400)[0]
    values = values - values[:, :1]
    fitted = structural.fit(values, 50, 0)
    assert (fitted["walk"] > 0).mean() > 0.8
    truth = values[:, -50:].mean(axis=1).var()
    assert np.median(fitted["variance"]) == pytest.approx(truth, rel=0.5)
