"""What a job gives back: its samples, its artifacts, and downloading them.

    opentinker jobs samples JOB [--step N] [--split train|eval|inference] [--json]
    opentinker jobs artifacts JOB [--json]
    opentinker download ARTIFACT [-o DIR] [--path adapter]   # e.g. job-<hex>-final --path adapter
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from opentinker_api.common.v1 import trajectory_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker.cli import exit_codes
from opentinker.cli.api import add_api_flags, message_json, print_json, scheduler_client
from opentinker.cli.table import format_table

SPLITS = ("train", "eval", "inference")
KIND_NAMES = {pb.Artifact.KIND_CHECKPOINT: "checkpoint", pb.Artifact.KIND_OUTPUT: "output"}


def register_job_actions(actions: argparse._SubParsersAction) -> None:
    samples = actions.add_parser("samples", help="what the model answered: a few episodes of each step")
    samples.add_argument("job_id")
    samples.add_argument("--step", type=int, help="only this step (default: the latest step with samples)")
    samples.add_argument("--split", choices=SPLITS, help="only training, evaluation or inference episodes")
    samples.add_argument("--all", action="store_true", help="every step's samples, newest first")
    artifacts = actions.add_parser("artifacts", help="a job's checkpoints and outputs, with sizes and checksums")
    artifacts.add_argument("job_id")
    for parser, handler in ((samples, cmd_samples), (artifacts, cmd_artifacts)):
        add_api_flags(parser)
        parser.set_defaults(handler=handler)


def register(commands: argparse._SubParsersAction) -> None:
    download = commands.add_parser("download", help="download a job's checkpoint or output (jobs artifacts JOB)")
    download.add_argument("artifact_id", help="a checkpoint id (job-<hex>-final) or <job_id>/<file>")
    download.add_argument("-o", "--output", type=Path, help="directory to write into (default ./<artifact name>)")
    download.add_argument("--path", default="", metavar="DIR",
                          help="only this directory of the artifact, written without it (e.g. adapter, model)")
    add_api_flags(download, json_output=False)
    download.set_defaults(handler=cmd_download)


def cmd_samples(args: argparse.Namespace) -> int:
    with scheduler_client(args) as client:
        found = client.list_samples(args.job_id, step=args.step, split=args.split or "",
                                    limit=10_000 if args.all else 20)
    if not args.all and args.step is None and found:
        found = [s for s in found if s.step == found[0].step]
    if args.json:
        print_json([message_json(s) for s in found])
        return exit_codes.OK
    if not found:
        print(f"job {args.job_id} has reported no samples{_filters(args)} yet")
        return exit_codes.OK
    print("\n\n".join(_sample_block(report, sample) for report in reversed(found) for sample in report.samples))
    return exit_codes.OK


def _filters(args: argparse.Namespace) -> str:
    said = [f"step {args.step}" if args.step is not None else "", f"split {args.split}" if args.split else ""]
    return "".join(f" for {text}" for text in said if text)


def _sample_block(report: job_pb2.SamplesReported, sample: job_pb2.EpisodeSample) -> str:
    agent = f" agent {report.agent_id}" if report.agent_id else ""
    verdict = "" if not sample.HasField("correct") else ("  correct" if sample.correct else "  wrong")
    stop = trajectory_pb2.StopReason.Name(sample.stop_reason).removeprefix("STOP_REASON_")
    lines = [f"== step {report.step} {report.split}{agent}  reward {sample.reward:.3g}  stop {stop}{verdict}",
             *_indented("prompt", sample.prompt)]
    for index, turn in enumerate(sample.turns):
        cut = " (cut off)" if turn.truncated else ""
        lines += _indented(f"reply {index + 1}{cut}", turn.action)
        if turn.observation:
            lines += _indented(f"env {index + 1} (reward {turn.reward:.3g})", turn.observation)
    return "\n".join(lines)


def _indented(label: str, text: str) -> list[str]:
    first, *more = (text or "").split("\n")
    return [f"  {label}: {first}", *(f"    {line}" for line in more)]


def cmd_artifacts(args: argparse.Namespace) -> int:
    with scheduler_client(args) as client:
        artifacts = client.list_artifacts(args.job_id)
    if args.json:
        print_json([message_json(a) for a in artifacts])
        return exit_codes.OK
    rows = [(a.artifact_id, KIND_NAMES.get(a.kind, "?"), a.format, a.step, _size(a.size_bytes), len(a.files),
             ", ".join(a.loadable_dirs)) for a in artifacts]
    print(format_table(("ARTIFACT", "KIND", "FORMAT", "STEP", "SIZE", "FILES", "LOADABLE"), rows) if rows
          else f"job {args.job_id} has no artifacts yet")
    if any(a.loadable_dirs for a in artifacts):
        example = next(a for a in artifacts if a.loadable_dirs)
        print(f"\ndownload one: opentinker download {example.artifact_id} --path {example.loadable_dirs[0]} "
              f"-o ./{example.loadable_dirs[0]}", file=sys.stderr)
    return exit_codes.OK


def _size(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def cmd_download(args: argparse.Namespace) -> int:
    destination = args.output or Path(args.artifact_id.replace("/", "_"))
    with scheduler_client(args) as client:
        written = client.download_artifact(args.artifact_id, destination, path_prefix=args.path)
    total = sum(path.stat().st_size for path in written)
    print(f"wrote {len(written)} files ({_size(total)}, SHA-256 checked) to {destination}")
    return exit_codes.OK
