"""Command line: `python -m inference generate --prompt ...` and `python -m inference chat`.

Both stream text as it is generated, through the engine (`LLMEngine`) on the default model
unless `--model` names a GGUF file or Hugging Face directory.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from inference.engine import EngineConfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m inference", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--model", default=None, help="GGUF file or HF directory "
                        "(default: bundled SmolLM2-135M-Instruct)")
    common.add_argument("--max-tokens", type=int, default=256)
    common.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    common.add_argument("--top-p", type=float, default=1.0)
    common.add_argument("--top-k", type=int, default=0)
    common.add_argument("--seed", type=int, default=None)
    common.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    common.add_argument("--system", default=None, help="system message")
    _engine_flags(common)
    gen = sub.add_parser("generate", parents=[common], help="one completion, streamed")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--raw", action="store_true", help="no chat template: plain completion")
    gen.add_argument("--stats", action="store_true", help="print load time and tokens/s")
    sub.add_parser("chat", parents=[common], help="interactive chat (empty line or EOF quits)")
    return parser


# EngineConfig fields the CLI sets from flags (name, type, help); unset flags keep the engine's
# defaults. --model is above (it is also the config's model).
_ENGINE_FLAGS: tuple[tuple[str, type, str], ...] = (
    ("chat_template", str, "a Jinja chat template file instead of the model's own"),
    ("device", str, "cpu or cuda[:N] (default cpu)"),
    ("dtype", str, "float32, bfloat16 or float16 (default: float32 on CPU)"),
    ("kv_cache_dtype", str, "dtype of the KV cache"),
    ("matmul_dtype", str, "CPU matmul mode (auto, float32, bfloat16...; default exact)"),
    ("kv_memory_mb", float, "KV-cache memory (default 64 here)"),
    ("block_size", int, "tokens per KV block"),
    ("max_num_batched_tokens", int, "token budget of one step"),
    ("max_num_seqs", int, "sequences one step may run"),
    ("max_model_len", int, "longest prompt + output"),
    ("num_threads", int, "torch threads of decode steps"),
    ("wide_threads", int, "torch threads of prefill steps"),
)
_CLI_DEFAULTS = {"kv_memory_mb": 64.0}  # one conversation: a small cache loads faster


def _engine_flags(parser: argparse.ArgumentParser) -> None:
    for name, kind, text in _ENGINE_FLAGS:
        parser.add_argument("--" + name.replace("_", "-"), type=kind, default=None, help=text)


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The engine's configuration from the command line's flags (and nothing else)."""
    from inference.engine import EngineConfig

    values = {name: getattr(args, name) for name, _, _ in _ENGINE_FLAGS}
    values = {**_CLI_DEFAULTS, **{k: v for k, v in values.items() if v is not None}}
    return EngineConfig(model=args.model, **values)


class _Session:
    """The engine plus the request template shared by both commands."""

    def __init__(self, args: argparse.Namespace) -> None:
        from inference.engine import LLMEngine
        from inference.request import SamplingParams

        t0 = time.perf_counter()
        self.engine = LLMEngine(engine_config(args))
        self.load_seconds = time.perf_counter() - t0
        self.sampling = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature,
                                       top_p=args.top_p, top_k=args.top_k, seed=args.seed,
                                       stop=tuple(args.stop))

    def stream(self, *, prompt: str | None = None,
               messages: list[dict] | None = None) -> Iterator[str]:
        """Yield text pieces of one request until it finishes."""
        from inference.request import EngineRequest

        request = EngineRequest(request_id=uuid.uuid4().hex, sampling=self.sampling,
                                prompt=prompt, messages=messages, tenant_id="cli")
        self.engine.add_request(request)
        while self.engine.has_unfinished():
            for delta in self.engine.step():
                if delta.text:
                    yield delta.text


def _generate(args: argparse.Namespace, out: TextIO) -> int:
    session = _Session(args)
    messages = ([{"role": "system", "content": args.system}] if args.system else [])
    messages.append({"role": "user", "content": args.prompt})
    t0, pieces = time.perf_counter(), 0
    source = (session.stream(prompt=args.prompt) if args.raw
              else session.stream(messages=messages))
    for piece in source:
        out.write(piece)
        out.flush()
        pieces += 1
    out.write("\n")
    if args.stats:
        stats = session.engine.stats()
        print(f"[load {session.load_seconds:.2f}s, {time.perf_counter() - t0:.2f}s generating, "
              f"{stats}]", file=sys.stderr)
    return 0


def _chat(args: argparse.Namespace, out: TextIO, inp: TextIO) -> int:
    session = _Session(args)
    history = [{"role": "system", "content": args.system}] if args.system else []
    while True:
        out.write("> ")
        out.flush()
        line = inp.readline()
        if not line or not line.strip():
            return 0
        history.append({"role": "user", "content": line.rstrip("\n")})
        reply = []
        for piece in session.stream(messages=history):
            out.write(piece)
            out.flush()
            reply.append(piece)
        out.write("\n")
        history.append({"role": "assistant", "content": "".join(reply)})


def main(argv: list[str] | None = None, *, out: TextIO | None = None,
         inp: TextIO | None = None) -> int:
    """Entry point; `out`/`inp` default to stdout/stdin (tests pass their own)."""
    args = _parser().parse_args(argv)
    out = out or sys.stdout
    if args.command == "generate":
        return _generate(args, out)
    return _chat(args, out, inp or sys.stdin)
