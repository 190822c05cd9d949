"""txlab.models.kernels: the CPU dropout (its drop rate, scaling, gradient and reproducibility) and the kept scores of\ninference attention."""

import math
import threading

import pytest
import torch

from txlab.models.attention import attention_mask
from txlab.models.kernels import DROP_LEVELS, Dropout, attend_relative, drop_threshold, dropout, kept_tensor, matmul_shared_keys, rel_shift


@pytest.mark.parametrize("p", [0.1, 0.25, 0.5, 0.9])
def test_the_drop_rate_is_the_threshold_over_the_levels_within_binomial_noise(p):
    torch.manual_seed(0)
    n = 1 << 21
    out = dropout(torch.ones(n), p, training=True)
    rate = drop_threshold(p) / DROP_LEVELS
    assert abs(rate - p) <= 0.5 / DROP_LEVELS
    dropped = float((out == 0).double().mean())
    assert abs(dropped - rate) < 5 * math.sqrt(rate * (1 - rate) / n)  # 5 standard errors
    assert torch.equal(out[out != 0], torch.full_like(out[out != 0], DROP_LEVELS / (DROP_LEVELS - drop_threshold(p))))


def test_survivors_are_scaled_by_their_exact_inverse_probability_so_the_expectation_is_unbiased():
    # 0.1 * 2^16 = 6553.6 rounds to 6554: the scale is 2^16 / (2^16 - 6554), not 1 / 0.9
    assert drop_threshold(0.1) == 6554
    torch.manual_seed(1)
    x = torch.ones(1 << 22, dtype=torch.float64)
    out = dropout(x, 0.1, training=True)
    assert float(out[out != 0][0]) == 65536 / (65536 - 6554)
    assert abs(float(out.mean()) - 1.0) < 5 * math.sqrt(0.1 / 0.9 / x.numel())


def test_every_16_bit_number_is_used_so_the_masks_of_neighbours_are_independent():
    # The four 16-bit numbers of one 64-bit draw decide four neighbouring entries: each position within a draw
    # drops at the same rate, and a pair of neighbours drops together at rate^2.
    torch.manual_seed(2)
    out = dropout(torch.ones(1 << 22), 0.5, training=True).view(-1, 4) == 0
    per_position = out.double().mean(0)
    assert torch.all((per_position - 0.5).abs() < 5 * math.sqrt(0.25 / out.size(0)))
    both = float((out[:, 0] & out[:, 3]).double().mean())
    assert abs(both - 0.25) < 5 * math.sqrt(0.25 * 0.75 / out.size(0))


def test_the_masks_follow_the_seed_and_the_gradient_is_the_mask():
    x = torch.randn(3, 5, 7, requires_grad=True)
    torch.manual_seed(3)
    first = dropout(x, 0.3, training=True)
    torch.manual_seed(3)
    again = dropout(x, 0.3, training=True)
    assert torch.equal(first, again)
    first.sum().backward()
    scale = DROP_LEVELS / (DROP_LEVELS - drop_threshold(0.3))
    assert torch.equal(x.grad, torch.where(first != 0, scale, 0.0))


def test_no_drop_outside_training_or_at_zero_and_odd_sizes_work():
    x = torch.randn(5, 3)
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0, training=True) is x
    assert dropout(torch.ones(0), 0.5, training=True).shape == (0,)
    assert dropout(torch.ones(7), 0.5, training=True).shape == (7,)  # not a multiple of the four numbers per draw
    assert drop_threshold(1 - 1e-9) == DROP_LEVELS - 1  # something always survives: the scale stays finite
    module = Dropout(0.5).eval()
    assert module(x) is x


def test_inference_attention_writes_the_softmax_over_kept_scores_with_the_same_numbers_as_a_fresh_softmax():
    torch.manual_seed(4)
    batch, n_head, n_query, n_mem, d_head = 2, 3, 5, 4, 8
    n_keys = n_mem + n_query
    q, keys, values = torch.randn(batch, n_head, n_query, d_head), torch.randn(batch, n_head, n_keys, d_head), torch.randn(batch, n_head, n_keys, d_head)
    by_distance = torch.randn(batch, n_head, n_query, n_keys + 1)
    mask = attention_mask(n_query, n_mem, 0, torch.float32)
    scores = torch.matmul(q, keys.transpose(-1, -2)) * 0.5 + rel_shift(by_distance) + mask
    expected = torch.matmul(scores.softmax(-1), values)
    with torch.no_grad():
        got = attend_relative(q, keys, values, by_distance, mask, 0.5)
        kept = kept_tensor("scores", (batch * n_head, n_query, n_keys), q)
        again = attend_relative(q, keys, values, by_distance, mask, 0.5)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert torch.equal(got, again)
    with torch.no_grad():
        assert kept_tensor("scores", (batch * n_head, n_query, n_keys), q) is kept  # one tensor serves every call of a thread
    rows = kept.view(-1, n_keys)
    torch.testing.assert_close(rows.sum(-1), torch.ones(rows.size(0)))  # the probabilities were written over the scores
    other = []
    def in_another_thread():
        with torch.no_grad():
            other.append(kept_tensor("scores", (batch * n_head, n_query, n_keys), q))

    thread = threading.Thread(target=in_another_thread)
    thread.start()
    thread.join()
    assert other[0] is not kept  # each thread has its own
    with torch.no_grad():
        position_keys = torch.randn(n_head, d_head, n_keys + 1)
        first = matmul_shared_keys(q, position_keys)
        torch.testing.assert_close(first, torch.matmul(q, position_keys), rtol=0, atol=1e-6)
        assert matmul_shared_keys(q, position_keys) is first  # kept: the next call writes over it
        assert kept_tensor("scores", (batch * n_head, n_query, n_keys), q) is kept  # the roles keep apart
    with torch.enable_grad():
        assert kept_tensor("scores", (batch * n_head, n_query, n_keys), q) is None  # a product with gradients may be saved


def test_the_in_place_softmax_equals_torch_softmax_bit_for_bit():
    # attend_relative writes the probabilities over the scores (aten._softmax with out= its input); torch promises
    # nothing about that aliasing, so this pins it on the torch in use, masked rows and all.
    torch.manual_seed(5)
    for shape in [(3, 7, 11), (64, 128, 256), (2, 5, 1)]:
        scores = torch.randn(shape, dtype=torch.float64) * 10
        scores[..., : shape[-1] // 2] = float("-inf") if shape[-1] > 1 else 0.0
        expected = scores.softmax(-1)
        torch.ops.aten._softmax.out(scores, -1, False, out=scores)
        assert torch.equal(scores, expected)
