import random

from services.model.tasks import MAKERS, TASKS, check, eval_set, is_grammatical_story
from services.model.tokenizer import CharTokenizer, build_tokenizer


def test_every_task_accepts_its_own_answer():
    rng = random.Random(0)
    for task in TASKS:
        for _ in range(50):
            ex = MAKERS[task](rng)
            assert check(ex, ex.answer), ex


def test_addition_answer_is_the_zero_padded_sum_least_significant_digit_first():
    ex = next(e for e in eval_set("add") if e.prompt == eval_set("add")[0].prompt)
    a, b = ex.prompt[len("add: "):-len(" -> ")].split("+")
    assert len(a) == len(b) == 2
    assert ex.answer == f"{int(a) + int(b):03d}"[::-1]


def test_eval_sets_are_seeded_and_fixed():
    assert eval_set("sort", 20) == eval_set("sort", 20)
    assert eval_set("sort", 20) != eval_set("copy", 20)


def test_story_check_accepts_grammar_and_refuses_word_salad():
    assert is_grammatical_story("the cat sees a dog. a big fox likes the hen.")
    assert not is_grammatical_story("the cat sees a dog.")  # a story has 2-3 sentences
    assert not is_grammatical_story("the cat dog sees. a big fox likes the hen.")
    cut = "the cat sees a dog. a big fox li"
    assert is_grammatical_story(cut, complete=False) and not is_grammatical_story(cut)
    assert not is_grammatical_story("the cat sees a dog. a big zebra", complete=False)


def test_tokenizer_round_trips_text_and_prepends_bos():
    tok = CharTokenizer(build_tokenizer())
    ids = tok.encode("sort: qwerty -> ")
    assert ids[0] == tok.bos_token_id and len(ids) == 1 + len("sort: qwerty -> ")
    assert tok.decode(ids) == "sort: qwerty -> "
    assert tok.decode(ids + [tok.eos_token_id]) == "sort: qwerty -> "
