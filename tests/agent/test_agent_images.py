"""The bounds on images sent as parts (agentd.agent.images) and on a partial
result's observations (agentd.agent.loop.LoopState): pure units, no peers."""

from __future__ import annotations

import base64

import pytest

from agentd.agent import images
from agentd.agent.loop import PARTIAL_OBSERVATION_BYTES, PARTIAL_OBSERVATIONS, LoopState
from agentd.errors import ConfigError
from agentd.intelligence.base import ImagePart
from agentd.wire import mcp_types as mt


def png(size: int) -> mt.ImageContent:
    return mt.ImageContent(data=base64.b64encode(b"\0" * size).decode(), mimeType="image/png")


def test_an_image_becomes_a_part_and_its_place_says_so() -> None:
    budget = images.ImageBudget()
    text, parts = budget.render([mt.TextContent(text="here"), png(30)], "c1", "s__img")
    assert text == "here\n" + images.SENT
    assert isinstance(parts[1], ImagePart)
    assert parts[1].image_url.url == "data:image/png;base64," + png(30).data
    assert budget.sent_bytes == 30


def test_past_a_bound_or_not_an_api_image_the_placeholder_stays() -> None:
    budget = images.ImageBudget()
    big = images.MAX_IMAGE_BYTES + 2  # a multiple of 3: no base64 padding
    text, parts = budget.render([png(big)], "c1", "t")
    assert parts == [] and text == (f"[image image/png, {big} bytes: not shown, past the "
                                    f"{images.MAX_IMAGE_BYTES}-byte bound per image]")
    svg = mt.ImageContent(data="PHN2Zz4=", mimeType="image/svg+xml")
    junk = mt.ImageContent(data="not base64!", mimeType="image/png")
    text, parts = budget.render([svg, junk], "c2", "t")
    assert parts == [] and text == "[image image/svg+xml, 6 bytes]\n[image image/png, 8 bytes]"
    # the conversation's images: every request resends them, so their sum is bounded
    budget.sent_bytes = images.MAX_REQUEST_IMAGE_BYTES - 10
    text, parts = budget.render([png(12)], "c3", "t")
    assert parts == [] and "bound on a conversation's images" in text


def test_the_mode_is_checked() -> None:
    assert images.check_mode("text") == "text"
    with pytest.raises(ConfigError, match="config key `tool_images`"):
        images.check_mode("png")


def test_a_partial_result_keeps_the_last_step_bounded() -> None:
    st = LoopState()
    assert st.partial_result() is None
    st.observed(1, "a", "old", is_error=False)
    for i in range(PARTIAL_OBSERVATIONS + 2):
        st.observed(2, f"t{i}", "x" * (PARTIAL_OBSERVATION_BYTES + 5), is_error=True)
    got = st.partial_result()["observations"]
    assert len(got) == PARTIAL_OBSERVATIONS and all(o["step"] == 2 for o in got)
    assert got[0] == {"step": 2, "tool": "t0", "is_error": True,
                      "bytes": PARTIAL_OBSERVATION_BYTES + 5,
                      "text": "x" * PARTIAL_OBSERVATION_BYTES}
    st.last_content = "the model's words"
    assert st.partial_result() == "the model's words"
