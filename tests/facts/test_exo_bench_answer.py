"""exo's `/bench/chat/completions` answer, shaped after exo's own models (no capture from a Mac yet): its
`generation_stats` are the figures `bench exo` keeps; an answer without them is an error, never a zero."""

from __future__ import annotations

import json

import pytest

from macfleet.errors import FactsParseError
from macfleet.facts.exoapi import parse_bench_answer


def test_a_bench_answer_gives_exos_own_figures_and_one_without_them_is_an_error() -> None:
    # BenchChatCompletionResponse (exo b5375f8 src/exo/api/types/api.py:214-216, GenerationStats :163-170)
    body = json.dumps({"id": "c1", "object": "chat.completion", "created": 1, "model": "org/m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "length"}],
        "generation_stats": {"prompt_tps": 812.5, "generation_tps": 41.25, "prompt_tokens": 30,
                             "generation_tokens": 128, "peak_memory_usage": {"inBytes": 1},
                             "prefix_cache_hit": "none"}, "power_usage": None})
    stats = parse_bench_answer(body)
    assert (stats.prompt_tps, stats.generation_tps, stats.generation_tokens) == (812.5, 41.25, 128)
    for bad in (json.dumps({"id": "c1", "choices": []}), "[]", "not json"):
        with pytest.raises(FactsParseError):
            parse_bench_answer(bad)
