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
from typing import TextIO


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
    common.add_argument("--device", default="cpu")
    common.add_argument("--kv-memory-mb", type=float, default=64.0)
    gen = sub.add_parser("generate", parents=[common], help="one completion, streamed")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--raw", action="store_true", help="no chat template: plain completion")
    gen.add_argument("--stats", action="store_true", help="print load time and tokens/s")
    sub.add_parser("chat", parents=[common], help="interactive chat (empty line or EOF quits)")
    return parser


class _Session:
    """The engine plus the request template shared by both commands."""

    def __init__(self, args: argparse.Namespace) -> None:
        from inference.engine import EngineConfig, LLMEngine
        from inference.request import SamplingParams

        t0 = time.perf_counter()
        self.engine = LLMEngine(EngineConfig(model=args.model, device=args.device,
                                             kv_memory_mb=args.kv_memory_mb))
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
