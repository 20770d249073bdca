"""`codedojo serve`: run a model behind the HTTP server (see `codedojo.inference.server`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codedojo.inference.specs import ModelSpec

from codedojo.cli import port_number, positive_int
from codedojo.inference.protocol import ENGINE_DTYPES


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "serve",
        help="serve a model over HTTP (SGLang /generate, OpenAI chat completions)",
        description="Serve a model with codedojo's local engine. Prints 'serving MODEL on URL' once the "
        "socket listens. --port 0 picks a free port.",
    )
    p.add_argument("--model", default="smollm2-135m-instruct",
                   help="smollm2-135m-instruct, tiny-llama, tiny-qwen3 or a Hugging Face folder "
                   "(default: smollm2-135m-instruct)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=30000, help="port (default: 30000; 0 = any free port)")
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--dtype", default="float32", choices=ENGINE_DTYPES,
                   help="compute dtype of the layers and the KV cache; norms, embeddings, head and sampling stay "
                   "fp32; auto = bfloat16 where the device has native bf16 (default: float32, the exact one)")
    p.add_argument("--kv-budget-tokens", type=positive_int, default=None,
                   help="KV cache budget in tokens (default: a quarter of memory, at most 8 GiB)")
    p.add_argument("--max-running", type=positive_int, default=64,
                   help="most requests in the running batch (default: 64)")
    p.add_argument("--max-waiting", type=_waiting, default=192,
                   help="generation requests admitted beyond the running batch; one more is answered 503 with "
                   "Retry-After at once (the OpenAI SDK and codedojo's client wait and retry); -1: no limit "
                   "(default: 192)")
    p.add_argument("--max-step-tokens", type=positive_int, default=1024,
                   help="most tokens per forward step, decode plus prefill chunks (default: 1024)")
    p.add_argument("--seed", type=int, default=None, help="seed for requests that carry none")
    p.add_argument("--context-length", type=positive_int, default=None,
                   help="positions of a tiny test model (tiny-llama, tiny-qwen3; default 2048); a real model's "
                   "context comes from its config")
    p.add_argument("--no-prefix-cache", action="store_true",
                   help="keep KV between requests only for session ids, not automatically (benchmarks)")
    p.set_defaults(func=_serve)


def _waiting(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -2
    if value < -1:
        raise argparse.ArgumentTypeError(f"expected a count of requests >= 0, or -1 for no limit, got {text!r}")
    return value


def _serve(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from codedojo.inference.engine import LocalEngine
    from codedojo.inference.errors import InferenceError
    from codedojo.inference.server import serve
    from codedojo.inference.specs import resolve_model
    from codedojo.precision import check_device

    try:
        device = check_device(args.device)
        spec = resolve_model(args.model)
        if args.context_length is not None:
            spec = _with_context(spec, args.context_length)
        engine = LocalEngine.from_spec(
            spec,
            device=device,
            dtype=args.dtype,
            kv_budget_tokens=args.kv_budget_tokens,
            max_running=args.max_running,
            max_step_tokens=args.max_step_tokens,
            seed=args.seed,
            prefix_cache=not args.no_prefix_cache,
        )
    except (InferenceError, ValueError) as error:  # a bad model, device or engine setting, named
        print(f"codedojo serve: {error}", file=sys.stderr)
        return 2

    def ready(url: str) -> None:
        print(f"serving {spec.name} on {url}", flush=True)

    async def main() -> None:
        task = asyncio.ensure_future(serve(engine, model_name=spec.name, host=args.host, port=args.port, ready=ready,
                                           max_waiting=None if args.max_waiting < 0 else args.max_waiting))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass

    try:
        asyncio.run(main())
    except OSError as error:  # the address is taken or not this machine's
        print(f"codedojo serve: cannot listen on {args.host}:{args.port}: {error.strerror or error}; pick another "
              "--port (0: any free one) or --host", file=sys.stderr)
        return 2
    return 0


def _with_context(spec: ModelSpec, positions: int) -> ModelSpec:
    import dataclasses

    from codedojo.inference.errors import UnknownModelError
    from codedojo.inference.specs import TinyModel

    if not isinstance(spec, TinyModel):
        raise UnknownModelError("--context-length applies to the tiny test models only; a real model's context "
                                "comes from its config.json")
    return dataclasses.replace(spec, max_positions=positions)
