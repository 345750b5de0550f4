"""The model's configuration as people set it (agentd/config/intelligence.py), through
the real `agentd` console script against the OpenAI-shaped gateway (tests/support/gateway.py):
the sampling settings as the gateway receives them, the model check's exit 2 before
any MCP connection, OPENAI_BASE_URL / OPENAI_API_KEY as fallbacks and their
precedence, a refused key named by its variable, a subagent's requests carrying
the root's settings."""

from __future__ import annotations

import asyncio

import pytest
from agentd_proc import agentd_env, run_agentd
from gateway import Gateway, Reply
from peers import free_port

from agentd.cli.flags import config_from_flags
from agentd.config.intelligence import Sampling, gateway, gateway_key
from agentd.errors import ConfigError

KEY = "sk-test-secret-4242"


def args(url: str, *extra: str) -> list[str]:
    return ["--instruction", "say hi", "--intelligence", url, *extra]


def usage_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


async def test_sampling_settings_reach_the_gateway_as_given(agentd_bin) -> None:
    async with Gateway([Reply.text("hi")]) as gw:
        done = await run_agentd(agentd_bin, args(
            gw.url, "--temperature", "0.2", "--top-p", "0.9", "--seed", "7",
            "--max-tokens", "256", "--tool-choice", "required", "--no-parallel-tool-calls",
            "--model-param", '{"reasoning_effort":"high","metadata":{"run":"x"}}'))
    assert done.rc == 0, done.stderr
    body = gw.bodies[0]
    assert {k: body[k] for k in ("model", "temperature", "top_p", "seed", "max_tokens",
                                 "tool_choice", "parallel_tool_calls", "reasoning_effort",
                                 "metadata")} == {
        "model": "test-model", "temperature": 0.2, "top_p": 0.9, "seed": 7, "max_tokens": 256,
        "tool_choice": "required", "parallel_tool_calls": False,
        "reasoning_effort": "high", "metadata": {"run": "x"}}


async def test_unset_settings_are_absent_and_a_tool_name_is_the_function_form(
        agentd_bin, tmp_path) -> None:
    conf = tmp_path / "agentd.toml"
    conf.write_text('temperature = 1\ntool_choice = "srv__echo"\nparallel_tool_calls = true\n'
                    'model = "from-file"\n[model_params]\nreasoning_effort = "low"\n')
    async with Gateway([Reply.text("hi"), Reply.text("hi")]) as gw:
        plain = await run_agentd(agentd_bin, args(gw.url))
        filed = await run_agentd(agentd_bin, args(gw.url, "--config", str(conf)))
    assert plain.rc == 0 and filed.rc == 0, plain.stderr + filed.stderr
    assert set(gw.bodies[0]) == {"messages", "model", "tools"}
    assert {k: v for k, v in gw.bodies[1].items() if k not in ("messages", "tools")} == {
        "model": "from-file", "temperature": 1.0, "parallel_tool_calls": True,
        "tool_choice": {"type": "function", "function": {"name": "srv__echo"}},
        "reasoning_effort": "low"}


async def test_no_model_is_exit_2_before_any_mcp_connection(agentd_bin) -> None:
    """The MCP server is a bare listener that records every connection: it sees none."""
    connected: list[object] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connected.append(writer.get_extra_info("peername"))
        writer.close()

    server = await asyncio.start_server(record, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, Gateway([Reply.text("hi")]) as gw:
        done = await run_agentd(agentd_bin, args(gw.url, "--mcp", f"srv=http://127.0.0.1:{port}/mcp"),
                                env=agentd_env(AGENTD_MODEL=""))
    assert done.rc == 2
    assert usage_line(done.stderr) == (
        f"agentd: error: --intelligence {gw.url}: no model configured: set --model NAME "
        "(or env AGENTD_MODEL, or model = \"NAME\" in --config)")
    assert connected == [] and gw.bodies == []


async def test_openai_variables_are_the_fallback(agentd_bin) -> None:
    async with Gateway([Reply.text("hi")]) as gw:
        done = await run_agentd(agentd_bin, ["--instruction", "say hi"], env=agentd_env(
            OPENAI_BASE_URL=gw.url, OPENAI_API_KEY=KEY))
    assert done.rc == 0, done.stderr
    assert gw.headers[0]["Authorization"] == f"Bearer {KEY}"
    assert KEY not in done.stderr + done.stdout


async def test_agentd_variables_and_flags_come_first(agentd_bin, tmp_path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    conf = tmp_path / "agentd.toml"
    conf.write_text('model = "file-model"\n')
    async with Gateway([Reply.text("hi"), Reply.text("hi")]) as gw:
        env = agentd_env(OPENAI_BASE_URL=dead, AGENTD_INTELLIGENCE=gw.url, AGENTD_MODEL="env-model",
                         OPENAI_API_KEY="sk-other", AGENTD_INTELLIGENCE_KEY=KEY)
        by_env = await run_agentd(agentd_bin, ["--instruction", "hi", "--config", str(conf)],
                                  env=env)
        by_flag = await run_agentd(agentd_bin, [*args(gw.url), "--model", "flag-model",
                                                "--config", str(conf)],
                                   env={**env, "AGENTD_INTELLIGENCE": dead})
    assert by_env.rc == 0 and by_flag.rc == 0, by_env.stderr + by_flag.stderr
    assert [b["model"] for b in gw.bodies] == ["file-model", "flag-model"]
    assert {h["Authorization"] for h in gw.headers} == {f"Bearer {KEY}"}


@pytest.mark.parametrize("env,hint", [
    ({"OPENAI_API_KEY": KEY}, "the key from env OPENAI_API_KEY was refused: check it is "
                              "the gateway's API key"),
    ({}, "no key was sent: set env AGENTD_INTELLIGENCE_KEY (or OPENAI_API_KEY) to the "
         "gateway's API key"),
])
async def test_a_refused_key_names_the_variable_never_the_value(agentd_bin, env, hint) -> None:
    async with Gateway([Reply.error(401)]) as gw:
        done = await run_agentd(agentd_bin, args(gw.url), env=agentd_env(**env))
    assert done.rc == 5
    [failed] = done.events("intelligence.unavailable")
    assert failed["error"] == (f"intelligence gateway {gw.url}/chat/completions refused the "
                               'request: HTTP 401 {"error": {"message": "scripted 401"}}: '
                               f"{hint}")
    assert KEY not in done.stderr


async def test_a_failing_gateway_keeps_its_own_text(agentd_bin) -> None:
    async with Gateway([Reply.error(500), Reply.error(503)]) as gw:
        done = await run_agentd(agentd_bin, args(gw.url, "--intelligence-attempts", "2"))
    assert done.rc == 5
    [failed] = done.events("intelligence.unavailable")
    assert failed["error"] == (f"intelligence gateway {gw.url}/chat/completions failing after "
                               '2 attempts: HTTP 503 {"error": {"message": "scripted 503"}}')


async def test_a_subagent_asks_with_the_roots_settings(agentd_bin) -> None:
    def script(body: dict) -> Reply:
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if user.endswith("child job"):
            return Reply.text("child done")
        if not any(m["role"] == "assistant" for m in body["messages"]):
            return Reply.tools(("agentd__subagent_spawn", {"instruction": "child job"}))
        return Reply.text("root done")

    async with Gateway([script] * 3) as gw:
        done = await run_agentd(agentd_bin, args(gw.url, "--temperature", "0.3", "--seed", "11",
                                                 "--model-param", '{"reasoning_effort":"low"}'))
    assert done.rc == 0, done.stderr
    assert len(gw.bodies) == 3
    users = [next(m["content"] for m in b["messages"] if m["role"] == "user") for b in gw.bodies]
    assert sum(u.endswith("child job") for u in users) == 1  # the child asked once
    for body in gw.bodies:
        assert (body["model"], body["temperature"], body["seed"], body["reasoning_effort"]) == \
            ("test-model", 0.3, 11, "low")


@pytest.mark.parametrize("flags,message", [
    ({"temperature": 2.5}, "--temperature 2.5: expected a number in [0, 2] (temperature in "
                           "--config)"),
    ({"top_p": -0.1}, "--top-p -0.1: expected a number in [0, 1] (top_p in --config)"),
    ({"max_tokens": 0}, "--max-tokens 0: expected an integer in [1, 2.14748e+09] "
                        "(max_tokens in --config)"),
    ({"tool_choice": "any tool"}, "--tool-choice 'any tool': expected auto, none, required or "
                                  "a tool's name as offered to the model (server__tool)"),
    ({"model_params": '{"stream": true}'}, "--model-param: 'stream' is set by agentd itself "
                                           "(refused: messages, tools, model, stream, "
                                           "stream_options)"),
    ({"model_params": '{"seed": 1}'}, "--model-param: 'seed' has its own flag: use --seed"),
    ({"model_params": "[1]"}, "--model-param: expected a JSON object such as "
                              "'{\"reasoning_effort\":\"high\"}' (model_params table in --config)"),
])
def test_settings_out_of_range_are_refused(flags, message) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_flags({"instruction": "x", **flags})
    assert str(err.value) == message


def test_resolution_order_and_key_source() -> None:
    values: dict = {}
    gateway(values, {"OPENAI_BASE_URL": "https://o/v1", "AGENTD_MODEL": "m"})
    assert values == {"intelligence": "https://o/v1", "model": "m"}
    values = {"intelligence": "https://flag/v1"}
    gateway(values, {"OPENAI_BASE_URL": "https://o/v1", "AGENTD_INTELLIGENCE": "https://a/v1",
                     "OPENAI_MODEL": "not-read"})
    assert values == {"intelligence": "https://flag/v1"}
    assert gateway_key({"OPENAI_API_KEY": "b", "AGENTD_INTELLIGENCE_KEY": "a"}) == \
        ("a", "AGENTD_INTELLIGENCE_KEY")
    assert gateway_key({}) == (None, None)
    assert Sampling().fields() == {}
