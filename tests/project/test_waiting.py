"""The suite's polling helper (tests/support/waiting.py): it returns what the condition
gave, takes plain and async conditions alike, and fails naming what never held.
A limit of 0 makes the ceiling case immediate: no time passes in these tests."""

from __future__ import annotations

import pytest
from waiting import until, until_sync


async def test_until_returns_the_truthy_value_of_a_plain_or_async_condition() -> None:
    seen = iter([None, [], {"k": 1}])
    assert await until(lambda: next(seen), step=0) == {"k": 1}

    async def counted() -> int:
        return 7

    assert await until(counted) == 7


async def test_until_fails_at_its_ceiling_saying_what_never_held() -> None:
    with pytest.raises(AssertionError) as err:
        await until(lambda: 0, limit=0, what="the moon is cheese")
    assert "the moon is cheese" in str(err.value) and "last seen: 0" in str(err.value)


def test_until_sync_is_the_same_outside_a_loop() -> None:
    seen = iter([False, "yes"])
    assert until_sync(lambda: next(seen), step=0) == "yes"
    with pytest.raises(AssertionError, match=r"never happened.*a port"):
        until_sync(lambda: None, limit=0, what="a port")
