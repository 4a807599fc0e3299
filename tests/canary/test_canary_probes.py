"""What the canary asks: held-out prompts per task in turn, length bands, fixed consistency probes."""
from itertools import islice

from sandbox.canary.probes import (
    ANSWER_SLACK_TOKENS,
    SEEDED_TEMPERATURE,
    STORY_MAX_TOKENS,
    AccuracyProbe,
    accuracy_probes,
    consistency_probes,
    length_band,
    prompt_seed,
    task_bands,
)
from services.model.tasks import TASKS, Example, eval_set


def test_length_bands_split_at_six_characters():
    assert [length_band("x" * n) for n in (1, 6, 7, 64)] == ["short", "short", "long", "long"]


def test_every_task_reports_the_bands_its_eval_set_holds():
    assert task_bands() == {"copy": ("long", "short"), "reverse": ("long", "short"), "sort": ("long", "short"),
                            "add": ("short",), "story": ("long",)}


def test_accuracy_probes_take_each_task_in_turn_from_its_held_out_set():
    first = list(islice(accuracy_probes(seed=0), 3 * len(TASKS)))
    assert [p.task for p in first] == list(TASKS) * 3
    for task in TASKS:
        held_out = {e.prompt for e in eval_set(task)}
        assert all(p.example.prompt in held_out for p in first if p.task == task)


def test_accuracy_probes_walk_the_whole_eval_set_before_repeating():
    copies = [p.example for p in islice(accuracy_probes(seed=0), 200 * len(TASKS)) if p.task == "copy"]
    assert sorted(e.prompt for e in copies) == sorted(e.prompt for e in eval_set("copy"))


def test_the_seed_changes_the_order_not_the_set():
    a = [p.example.prompt for p in islice(accuracy_probes(seed=0), 50)]
    b = [p.example.prompt for p in islice(accuracy_probes(seed=1), 50)]
    assert a != b and a == [p.example.prompt for p in islice(accuracy_probes(seed=0), 50)]


def test_accuracy_probes_are_greedy_with_room_for_a_run_on_answer():
    probe = AccuracyProbe(Example("copy", "copy: abc -> ", "abc")).probe
    assert (probe.temperature, probe.seed, probe.max_tokens) == (0.0, None, 3 + ANSWER_SLACK_TOKENS)
    assert AccuracyProbe(Example("story", "story: the ", "cat sees a dog.")).probe.max_tokens == STORY_MAX_TOKENS
    assert probe.body("m") == {"model": "m", "prompt": "copy: abc -> ", "max_tokens": 7, "temperature": 0.0}


def test_consistency_probes_ask_every_prompt_greedy_and_seeded_stories_first():
    probes = consistency_probes(seed=0)
    assert [p.mode for p in probes[:2]] == ["greedy", "seeded"]
    assert probes[0].key == "story-0/greedy" and probes[1].key == "story-0/seeded"
    assert len({p.key for p in probes}) == len(probes)
    prompts = {p.probe.prompt for p in probes}
    assert {(p.probe.prompt, p.mode) for p in probes} == {(q, m) for q in prompts for m in ("greedy", "seeded")}
    for p in probes:
        if p.mode == "greedy":
            assert p.probe.temperature == 0 and p.probe.seed is None
        else:
            assert p.probe.temperature == SEEDED_TEMPERATURE and p.probe.seed == prompt_seed(p.probe.prompt, 0)
            assert p.probe.body("m")["seed"] == p.probe.seed


def test_prompt_seeds_are_stable_across_processes():
    assert prompt_seed("story: the ", 0) == 527642638  # crc32, not hash()
    assert prompt_seed("story: the ", 1) != prompt_seed("story: the ", 0)
