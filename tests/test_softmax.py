import pytest
import torch
import torch.nn.functional as F

from txlab.errors import TxlabError
from txlab.softmax import AdaptiveEmbedding, AdaptiveLogSoftmax


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
