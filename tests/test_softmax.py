import pytest
import torch
import torch.nn.functional as F

from txlab.errors import TxlabError
from txlab.models.softmax import AdaptiveEmbedding, AdaptiveLogSoftmax, linear_nll


def _pair(n_token=50, d_embed=16, d_proj=8, cutoffs=(10, 30), div_val=2, seed=0):
    torch.manual_seed(seed)
    emb = AdaptiveEmbedding(n_token, d_embed, d_proj, list(cutoffs), div_val).double()
    crit = AdaptiveLogSoftmax(n_token, d_embed, d_proj, list(cutoffs), div_val).double()
    # non-zero cluster parameters so the cluster tokens matter in the check
    if cutoffs:
        torch.nn.init.normal_(crit.cluster_weight, std=0.5)
        torch.nn.init.normal_(crit.cluster_bias, std=0.5)
    return emb, crit


@pytest.mark.parametrize("cutoffs, div_val, d_embed", [((10, 30), 2, 16), ((10, 30), 1, 16), ((), 1, 8), ((), 1, 12)])
def test_log_prob_is_a_distribution_and_nll_matches_it_in_token_order(cutoffs, div_val, d_embed):
    _, crit = _pair(cutoffs=cutoffs, div_val=div_val, d_embed=d_embed)
    hidden = torch.randn(40, 8, dtype=torch.float64)
    # targets deliberately interleave clusters so cluster-grouped output would be out of order
    target = torch.tensor([49, 0, 15, 9, 10, 29, 30, 1] * 5)
    log_prob = crit.log_prob(hidden)
    assert log_prob.shape == (40, 50)
    torch.testing.assert_close(log_prob.exp().sum(1), torch.ones(40, dtype=torch.float64))
    expected = -log_prob.gather(1, target[:, None]).squeeze(1)
    torch.testing.assert_close(crit.nll(hidden, target), expected)


def test_adaptive_softmax_equals_hand_computed_two_level_probability():
    _, crit = _pair()
    hidden = torch.randn(3, 8, dtype=torch.float64)
    target = torch.tensor([3, 12, 45])
    # head: 10 words + 2 cluster tokens; cluster 1 = words 10..29, cluster 2 = words 30..49
    head = F.log_softmax(crit._cluster_logits(0, hidden), -1)
    tail1 = F.log_softmax(crit._cluster_logits(1, hidden), -1)
    tail2 = F.log_softmax(crit._cluster_logits(2, hidden), -1)
    expected = -torch.stack([head[0, 3], head[1, 10] + tail1[1, 2], head[2, 11] + tail2[2, 15]])
    torch.testing.assert_close(crit.nll(hidden, target), expected)


def test_embedding_uses_each_cluster_table_and_scale():
    emb, _ = _pair()
    tokens = torch.tensor([[0, 12], [45, 9]])
    out = emb(tokens)
    assert out.shape == (2, 2, 8)
    scale = 8**0.5
    word_45 = emb.emb_layers[2].weight[15] @ emb.emb_projs[2].t()
    torch.testing.assert_close(out[1, 0], word_45 * scale)
    word_0 = emb.emb_layers[0].weight[0] @ emb.emb_projs[0].t()
    torch.testing.assert_close(out[0, 0], word_0 * scale)


def test_tying_shares_tensors():
    emb, crit = _pair()
    crit.tie_to(emb, tie_weight=True, tie_projs=True)
    for i in range(3):
        assert crit.out_layers[i].weight is emb.emb_layers[i].weight
        assert crit.out_projs[i] is emb.emb_projs[i]
    untied = sum(p.numel() for p in _pair()[1].parameters())
    shared = {id(p) for p in emb.parameters()}
    assert sum(p.numel() for p in crit.parameters() if id(p) not in shared) < untied


def test_plain_softmax_has_no_cluster_parameters():
    # a zero-size parameter never receives a gradient, which DistributedDataParallel refuses
    _, crit = _pair(cutoffs=(), d_embed=8)
    assert crit.cluster_weight is None and crit.cluster_bias is None
    crit.nll(torch.randn(4, 8, dtype=torch.float64), torch.tensor([0, 1, 2, 3])).sum().backward()
    assert all(p.grad is not None for p in crit.parameters())


def test_bad_cutoffs_are_user_errors():
    with pytest.raises(TxlabError, match="ascending"):
        AdaptiveLogSoftmax(50, 16, 8, [30, 10], 1)
    with pytest.raises(TxlabError, match="ascending"):
        AdaptiveEmbedding(50, 16, 8, [10, 50], 1)
    with pytest.raises(TxlabError, match="no embedding dimensions"):
        AdaptiveEmbedding(50, 4, 8, [10, 20, 30], 4)


def _unique_count(*modules):
    return sum(p.numel() for p in {id(p): p for m in modules for p in m.parameters()}.values())


def test_ties_are_per_cluster():
    emb, crit = _pair()  # clusters of 10, 20, 20 words and width 16, 8 (no projection), 4, projected to 8
    crit.tie_to(emb, tie_weight=[True, False, True], tie_projs=[False, True, True])
    assert [crit.out_layers[i].weight is emb.emb_layers[i].weight for i in range(3)] == [True, False, True]
    assert crit.out_projs[0] is not emb.emb_projs[0] and crit.out_projs[1] is None and crit.out_projs[2] is emb.emb_projs[2]
    untied = _unique_count(*_pair())
    # shared: the weights of clusters 0 and 2, the projection of cluster 2
    assert untied - _unique_count(emb, crit) == 10 * 16 + 20 * 4 + 8 * 4
    with pytest.raises(TxlabError, match="tie_projs lists 2 flags but the adaptive softmax has 3 clusters"):
        crit.tie_to(emb, tie_weight=True, tie_projs=[True, False])


def test_a_full_width_projection_is_optional_and_changes_only_the_parameterisation():
    torch.manual_seed(0)
    args = (50, 8, 8, [10, 30], 2)  # the head is 8 wide, as wide as the model
    plain_emb, plain_crit = AdaptiveEmbedding(*args).double(), AdaptiveLogSoftmax(*args).double()
    emb = AdaptiveEmbedding(*args, full_width_proj=True).double()
    crit = AdaptiveLogSoftmax(*args, full_width_proj=True).double()
    assert plain_emb.emb_projs[0] is None and plain_crit.out_projs[0] is None
    assert emb.emb_projs[0].shape == crit.out_projs[0].shape == (8, 8)
    assert _unique_count(emb, crit) - _unique_count(plain_emb, plain_crit) == 2 * 8 * 8
    # with identity head projections and the other parameters copied, the same function
    emb.load_state_dict({**plain_emb.state_dict(), "emb_projs.0": torch.eye(8)})
    crit.load_state_dict({**plain_crit.state_dict(), "out_projs.0": torch.eye(8)})
    tokens, hidden = torch.tensor([[0, 12, 45, 9]]), torch.randn(4, 8, dtype=torch.float64)
    torch.testing.assert_close(emb(tokens), plain_emb(tokens))
    torch.testing.assert_close(crit.log_prob(hidden), plain_crit.log_prob(hidden))


def test_div_val_1_has_one_input_projection_for_every_cluster():
    emb, crit = _pair(d_embed=12, div_val=1)
    assert all(p is emb.emb_projs[0] for p in emb.emb_projs) and emb.emb_projs[0].shape == (8, 12)
    assert len({id(p) for p in crit.out_projs}) == 3  # the output side keeps one per cluster, as the reference
    assert _unique_count(emb) == 50 * 12 + 8 * 12
    crit.tie_to(emb, tie_weight=True, tie_projs=[False, True, True])
    assert crit.out_projs[1] is crit.out_projs[2] is emb.emb_projs[0] and crit.out_projs[0] is not emb.emb_projs[0]
    # one gradient for the shared projection, summed over every cluster that uses it
    emb(torch.tensor([0, 15, 40])).sum().backward()
    assert emb.emb_projs[0].grad is not None and emb.emb_projs[0].grad.abs().sum() > 0


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_nll_equals_log_softmax_then_gather_with_its_gradients(dtype, tol, with_bias):
    # 300 rows: more than one block of rows, and a last block that is not full
    torch.manual_seed(0)
    hidden = torch.randn(300, 24, dtype=dtype, requires_grad=True)
    weight = torch.randn(700, 24, dtype=dtype, requires_grad=True)
    bias = torch.randn(700, dtype=dtype, requires_grad=True) if with_bias else None
    target = torch.randint(0, 700, (300,))
    upstream = torch.rand(300, dtype=dtype)  # an uneven gradient, not just the mean's
    inputs = [t for t in (hidden, weight, bias) if t is not None]

    plain = -F.log_softmax(F.linear(hidden, weight, bias), -1).gather(1, target[:, None]).squeeze(1)
    plain_grads = torch.autograd.grad((plain * upstream).sum(), inputs)
    fused = linear_nll(hidden, weight, bias, target)
    fused_grads = torch.autograd.grad((fused * upstream).sum(), inputs)

    torch.testing.assert_close(fused, plain, rtol=0, atol=tol)
    for got, expected in zip(fused_grads, plain_grads):
        torch.testing.assert_close(got, expected, rtol=tol, atol=tol)


def test_the_in_place_log_softmax_equals_torch_log_softmax_bit_for_bit():
    # the loss turns its logits into log-probabilities over themselves (aten._log_softmax with out= its input); torch
    # promises nothing about that aliasing, so this pins it on the torch in use, from one row to more rows than threads
    from txlab.models.softmax import _log_probs_in

    torch.manual_seed(6)
    for dtype in (torch.float32, torch.float64):
        for shape in [(1, 1), (3, 7), (1024, 10_000), (5, 40_001)]:
            logits = torch.randn(shape, dtype=dtype) * 20
            expected = F.log_softmax(logits, dim=-1)
            out = _log_probs_in(logits)
            assert out.data_ptr() == logits.data_ptr() and torch.equal(out, expected), (dtype, shape)


def test_linear_nll_refuses_a_second_backward_over_its_consumed_log_probs():
    hidden = torch.randn(4, 3, requires_grad=True)
    loss = linear_nll(hidden, torch.randn(5, 3), None, torch.tensor([0, 1, 2, 3])).sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="cannot run twice"):
        loss.backward()


def test_plain_softmax_nll_goes_through_the_fused_loss_and_matches_log_prob():
    _, crit = _pair(cutoffs=(), d_embed=12)  # a projection 8 -> 12 before the output layer
    hidden = torch.randn(20, 8, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 50, (20,))
    expected = -crit.log_prob(hidden).gather(1, target[:, None]).squeeze(1)
    torch.testing.assert_close(crit.nll(hidden, target), expected, rtol=0, atol=1e-12)
    expected_grad = torch.autograd.grad(expected.sum(), hidden)[0]
    torch.testing.assert_close(torch.autograd.grad(crit.nll(hidden, target).sum(), hidden)[0], expected_grad, rtol=0, atol=1e-12)


def _losses_and_gradients(softmax, hidden, target, kept):
    """Each row's loss and the gradients of their sum (hidden, weight, bias), computed with ``kept`` logits or fresh."""
    hidden = hidden.clone().requires_grad_()
    layer = softmax.out_layers[0]
    nll = linear_nll(hidden, layer.weight, layer.bias, target, kept)
    grads = torch.autograd.grad(nll.sum(), (hidden, layer.weight, layer.bias))
    return nll.detach(), grads


def test_the_logits_are_computed_in_the_kept_tensor_with_and_without_gradients_bit_for_bit():
    torch.manual_seed(0)
    softmax = AdaptiveLogSoftmax(n_token=300, d_embed=16, d_proj=16, cutoffs=[])
    hidden, target = torch.randn(200, 16), torch.randint(0, 300, (200,))
    kept = softmax.logits_scratch(hidden)
    fresh, fresh_grads = _losses_and_gradients(softmax, hidden, target, None)
    for _ in range(2):  # the second call reuses the tensor the first one lent and got back
        nll, grads = _losses_and_gradients(softmax, hidden, target, kept)
        assert torch.equal(nll, fresh) and all(torch.equal(a, b) for a, b in zip(grads, fresh_grads))
    lent = kept.lend(200, 300, hidden)
    assert lent is not None and kept.lend(200, 300, hidden) is None  # one borrower at a time
    kept.give_back()
    assert kept.lend(200, 300, hidden) is lent  # kept from one call to the next
    kept.give_back()
    assert kept.lend(150, 300, hidden) is not lent
    kept.give_back()
    with torch.no_grad():
        assert torch.equal(softmax.nll(hidden, target), fresh)
        assert torch.equal(softmax.nll(hidden[:150], target[:150]), fresh[:150])
    with torch.inference_mode():  # a tensor made outside inference mode cannot be written inside it, nor the other way round
        assert torch.equal(softmax.nll(hidden, target), fresh)
    with torch.no_grad():
        assert torch.equal(softmax.nll(hidden, target), fresh)
    assert softmax.logits_scratch(hidden.to("meta")) is None  # only the CPU keeps one


def test_a_graph_holds_the_kept_logits_until_its_backward_so_other_calls_meanwhile_compute_afresh():
    torch.manual_seed(1)
    softmax = AdaptiveLogSoftmax(n_token=50, d_embed=8, d_proj=8, cutoffs=[])
    kept, layer = softmax.logits_scratch(torch.empty(0)), softmax.out_layers[0]
    h1, h2 = torch.randn(30, 8), torch.randn(30, 8)
    t1, t2 = torch.randint(0, 50, (30,)), torch.randint(0, 50, (30,))
    want1, want2 = _losses_and_gradients(softmax, h1, t1, None), _losses_and_gradients(softmax, h2, t2, None)
    a, b = h1.clone().requires_grad_(), h2.clone().requires_grad_()
    first = linear_nll(a, layer.weight, layer.bias, t1, kept)  # borrows the kept tensor for its graph
    assert kept.lend(30, 50, h1) is None
    second = linear_nll(b, layer.weight, layer.bias, t2, kept)  # a fresh tensor: the first graph still needs its own
    with torch.no_grad():
        assert torch.equal(softmax.nll(h2, t2), want2[0])  # an evaluation in between computes afresh too
    grads2 = torch.autograd.grad(second.sum(), (b, layer.weight, layer.bias))
    grads1 = torch.autograd.grad(first.sum(), (a, layer.weight, layer.bias))  # the kept tensor was never overwritten
    assert torch.equal(first.detach(), want1[0]) and all(torch.equal(x, y) for x, y in zip(grads1, want1[1]))
    assert torch.equal(second.detach(), want2[0]) and all(torch.equal(x, y) for x, y in zip(grads2, want2[1]))
    assert kept.lend(30, 50, h1) is not None  # given back by the backward pass
    kept.give_back()
    dropped = linear_nll(h1.clone().requires_grad_(), layer.weight, layer.bias, t1, kept)
    assert kept.lend(30, 50, h1) is None
    del dropped  # a graph freed without its backward pass gives the tensor back too
    assert kept.lend(30, 50, h1) is not None
