"""`vramscope mcp` as an agent's client meets it: the server run as a subprocess, spoken to in
JSON-RPC over its stdin and stdout (the MCP stdio transport, a message a line): initialize, the
tools listed, each called on bundled traces, and a bad input answered as that call's error while
the server goes on."""

import json
import os
import subprocess
import sys

import pytest

from conftest import DATA, vramscope

pytest.importorskip("mcp")

TOOLS = {"analyze", "leaks", "owners", "peak", "diff", "compare_table"}


class Client:
    def __init__(self, cwd):
        self.proc = subprocess.Popen([sys.executable, "-m", "vramscope", "mcp"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
        self.next_id = 0

    def send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:  # every line on stdout is a message: the protocol's alone
            line = self.proc.stdout.readline()
            assert line, f"the server ended: {self.proc.stderr.read()}"
            message = json.loads(line)
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message["result"]

    def call(self, tool: str, **arguments) -> dict:
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def close(self) -> int:
        self.proc.stdin.close()
        return self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    c = Client(DATA)
    init = c.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "vramscope-test", "version": "1"}})
    assert init["serverInfo"]["name"] == "vramscope" and "tools" in init["capabilities"]
    c.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    yield c
    assert c.close() == 0


def test_the_tools_each_take_a_path(client):
    tools = {t["name"]: t for t in client.request("tools/list", {})["tools"]}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert "path" in tool["inputSchema"]["required"] and tool["description"], tool
        assert "\n    " not in tool["description"], "a docstring's indent is no part of what a tool does"


def test_analyze_gives_the_verdict_of_a_bundled_trace_in_text_and_structured(client):
    result = client.call("analyze", path="leak_ctx_losses.pickle.gz")  # relative: the server's folder
    assert not result.get("isError")
    text = result["content"][0]["text"]
    assert "LEAK  +2.5 MiB per optimizer step since step 0" in text
    assert text == vramscope("analyze", str(DATA / "leak_ctx_losses.pickle.gz")).stdout  # the summary's words
    found = result["structuredContent"]
    assert found["verdict"] == "leak"
    (run,) = found["runs"]
    assert [leak["bytes_per_step"] for leak in run["leaks"]] == [2097152, 524288]
    assert run["leaks"][0]["site"]["line"] == 218 and run["ledger"][0]["parts"]["leak"] > 0
    assert run["peak"][0]["bytes"] > 0


def test_leaks_owners_and_peak_read_the_same_findings(client):
    trace = str(DATA / "device" / "pg_per_step.vscope")
    leaks = client.call("leaks", path=trace)
    assert "+388.0 MiB/step at record_device_fixtures.py:351 scenario_pg_per_step (external memory, NCCL" in \
        leaks["content"][0]["text"]
    assert leaks["structuredContent"]["leaks"][0]["library"] == "NCCL"
    owners = client.call("owners", path=trace)  # joined from pg_per_step.vscope.owners.json
    assert "torch.distributed.distributed_c10d._pg_map" in owners["content"][0]["text"]
    assert owners["structuredContent"]["leaks"][0]["owners"][0]["kind"] == "reachable"
    snapshot = client.call("owners", path="leak_ctx_losses.pickle.gz")
    assert "found by a live capture" in snapshot["content"][0]["text"]
    peak = client.call("peak", path=str(DATA / "peak" / "peak_adamw.vscope"))
    (p,) = peak["structuredContent"]["peak"]
    assert sum(c["bytes"] for c in p["categories"]) == p["bytes"]
    assert peak["content"][0]["text"].startswith("cuda:0 ")
    text = client.call("peak", path="leak_offload_stream.pickle.gz")["content"][0]["text"]
    assert "  40.0 MiB gradients at <no Python frame: autograd engine or C++ thread>\n" in text, text  # no ":0"


def test_diff_and_compare_table(client, tmp_path):
    d = client.call("diff", path="leak_ctx_losses.pickle.gz", other="clean_adamw_accum.pickle.gz")
    assert d["structuredContent"]["schema"] == "vramscope.diff"
    assert [leak["change"] for leak in d["structuredContent"]["leaks"]] == ["gone", "gone"]
    table = client.call("compare_table", path=str(DATA / "hostile" / "compare_cell_error.json"))
    assert table["structuredContent"]["schema"] == "vramscope.compare.table", table
    assert "vramscope compare" in table["content"][0]["text"]


@pytest.mark.parametrize("tool, arguments, says", [
    ("analyze", {"path": "/nonexistent.pickle"}, "/nonexistent.pickle: cannot open"),
    ("analyze", {"path": str(DATA / "hostile" / "code_reduce.pickle")}, "refused"),
    ("leaks", {"path": str(DATA / "hostile" / "findings_not_json.json")}, "findings_not_json.json"),
    ("compare_table", {"path": "leak_ctx_losses.pickle.gz"}, "leak_ctx_losses.pickle.gz"),
    ("diff", {"path": "leak_ctx_losses.pickle.gz"}, "other"),
])
def test_bad_input_is_the_calls_error_and_the_server_goes_on(client, tool, arguments, says):
    result = client.call(tool, **arguments)
    assert result["isError"] and says in result["content"][0]["text"], result
    assert client.call("analyze", path="clean_adamw_accum.pickle.gz")["structuredContent"]["verdict"] == "no-leak"


def test_without_the_sdk_the_command_says_how_to_get_it(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['mcp'] = None\n")  # as if not installed
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "vramscope", "mcp"], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode == 2 and "pip install 'vramscope[mcp]'" in proc.stderr, proc.stderr
