"""Sampling and lossless draft verification, on synthetic distributions."""
import pytest
import torch
from scipy import stats

from services.engine.rejection_sampler import verify
from services.engine.sampler import _top_k_top_p, processed_probs, sample
from services.engine.sampling_params import SamplingParams


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.05, 0.4, 0.3, 0.2, 0.05]])
    out = _top_k_top_p(probs, [SamplingParams(top_p=0.7)])
    # 0.4 + 0.3 = 0.7 reaches p: exactly those two survive, renormalised.
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.4 / 0.7, 0.3 / 0.7, 0.0, 0.0]]))
    out = _top_k_top_p(probs, [SamplingParams(top_p=0.71)])
    assert (out > 0).sum() == 3


def test_top_k_keeps_k_most_likely_tokens():
    probs = torch.tensor([[0.1, 0.4, 0.3, 0.2]])
    out = _top_k_top_p(probs, [SamplingParams(top_k=2)])
    assert out[0].nonzero().flatten().tolist() == [1, 2]


def test_greedy_rows_become_one_hot():
    logits = torch.tensor([[0.1, 2.0, 1.0]])
    assert processed_probs(logits, [SamplingParams(temperature=0)]).tolist() == [[0.0, 1.0, 0.0]]


def test_same_seed_gives_same_tokens_whatever_the_batch():
    torch.manual_seed(0)
    logits = torch.randn(6, 50)
    params = [SamplingParams(temperature=1.0, top_p=0.9, seed=s) for s in range(6)]
    batch = sample(logits, params, [torch.Generator().manual_seed(p.seed) for p in params])
    alone = [sample(logits[i:i + 1], [params[i]], [torch.Generator().manual_seed(params[i].seed)])[0]
             for i in range(6)]
    assert batch == alone


def test_sampling_follows_the_distribution():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log()[None]
    g = torch.Generator().manual_seed(1)
    draws = [sample(logits, [SamplingParams(temperature=1.0)], [g])[0] for _ in range(4000)]
    counts = torch.bincount(torch.tensor(draws), minlength=4).numpy()
    expected = probs.double().numpy() / float(probs.double().sum()) * 4000
    assert stats.chisquare(counts, expected).pvalue > 1e-3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rejection_sampling_output_is_distributed_as_the_target(seed):
    """Lossless: the first emitted token follows p, whatever the draft q."""
    g = torch.Generator().manual_seed(seed)
    v, trials = 6, 6000
    p = torch.softmax(torch.randn(2, v, generator=g) * 1.5, -1)  # target at positions 1, 2
    q = torch.softmax(torch.randn(1, v, generator=g) * 1.5, -1)  # draft at position 1
    firsts = []
    for _ in range(trials):
        d = int(torch.multinomial(q[0], 1, generator=g))
        tokens, _ = verify([d], q, p, g, greedy=False)
        firsts.append(tokens[0])
    counts = torch.bincount(torch.tensor(firsts), minlength=v).numpy()
    expected = p[0].double().numpy() / float(p[0].double().sum()) * trials
    assert stats.chisquare(counts, expected).pvalue > 1e-3


def test_greedy_verification_accepts_while_the_draft_matches_the_argmax():
    p = torch.eye(5)[[1, 2, 3, 4]]  # target argmax: 1, 2, 3, then bonus 4
    q = torch.eye(5)[[1, 2, 0]]
    tokens, accepted = verify([1, 2, 0], q, p, torch.Generator(), greedy=True)
    assert (tokens, accepted) == ([1, 2, 3], 2)
    tokens, accepted = verify([1, 2, 3], torch.eye(5)[[1, 2, 3]], p, torch.Generator(), greedy=True)
    assert (tokens, accepted) == ([1, 2, 3, 4], 3)


@pytest.mark.parametrize("kwargs,field", [({"seed": 10**30}, "seed"), ({"seed": True}, "seed"),
                                          ({"top_k": 10**30}, "top_k"), ({"temperature": float("inf")}, "temperature"),
                                          ({"temperature": float("nan")}, "temperature")])
def test_a_value_the_engine_cannot_use_is_refused_naming_its_field(kwargs, field):
    # A seed past torch's range once failed inside the engine, after the scheduler had taken the request:
    # the next step found no state for it and the replica's engine died for every client.
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def test_the_whole_range_of_torch_seeds_is_accepted():
    assert SamplingParams(seed=2**64 - 1).seed == 2**64 - 1 and SamplingParams(seed=-(2**63)).seed == -(2**63)
