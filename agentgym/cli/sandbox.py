"""``agentgym sandbox {build-image,doctor,prune}``: manage the code-execution sandbox."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``sandbox`` command and its subcommands."""
    p = subparsers.add_parser(
        "sandbox",
        help="build the sandbox image, check the setup, remove leftover containers",
        description="Manage the sandbox that runs model-written code (see docs/sandbox.md).",
    )
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    sub = p.add_subparsers(dest="sandbox_command", metavar="SUBCOMMAND")

    b = sub.add_parser(
        "build-image",
        help="build the default Docker image locally (debootstrap; cached)",
        description=(
            "Build the default sandbox image from the Debian package archive with debootstrap "
            "and import it into Docker. Does nothing when the image already exists. Needs "
            "root, debootstrap and a running engine."
        ),
    )
    b.add_argument("--image", help="name to give the image (default: agentgym-sandbox:<recipe>)")
    b.add_argument("--suite", default=None, help="Debian release (default: bookworm)")
    b.add_argument(
        "--mirror", default=None, help="Debian mirror URL (default: the one this host's apt uses)"
    )
    b.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    b.set_defaults(func=_build_image)

    d = sub.add_parser(
        "doctor",
        help="check engine, image and permissions, with the fix for each problem",
    )
    d.add_argument("--image", help="image to check (default: the configured one)")
    d.add_argument("--no-smoke", action="store_true", help="do not start a sandbox to test it")
    d.set_defaults(func=_doctor)

    r = sub.add_parser(
        "prune",
        help="remove sandbox containers whose owner process is gone",
    )
    r.add_argument(
        "--all", action="store_true", help="remove every agentgym sandbox container, live or not"
    )
    r.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    r.set_defaults(func=_prune)


def _build_image(args: argparse.Namespace) -> int:
    from agentgym.sandbox import ImageRecipe, build_image

    recipe = ImageRecipe(suite=args.suite) if args.suite else ImageRecipe()
    result = build_image(
        args.image,
        recipe=recipe,
        mirror=args.mirror,
        force=args.force,
        progress=lambda line: print(line, flush=True),
    )
    if result.built:
        print(f"built {result.image} ({result.size_mb:.0f} MiB) in {result.seconds:.0f} s")
    else:
        print(f"{result.image} is already built ({result.size_mb:.0f} MiB); nothing to do")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from agentgym.sandbox import doctor

    checks = doctor(args.image, smoke_test=not args.no_smoke)
    width = max(len(c.name) for c in checks)
    for c in checks:
        mark = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}[c.status]
        print(f"[{mark}] {c.name:<{width}}  {c.detail}")
        if c.fix:
            print(f"       {'':<{width}}  fix: {c.fix}")
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        print(f"{len(failed)} problem(s); the Docker backend cannot be used until they are fixed.")
        return 1
    print("The Docker sandbox is ready.")
    return 0


def _prune(args: argparse.Namespace) -> int:
    from agentgym.sandbox import prune

    names = prune(everything=args.all, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for name in names:
        print(f"{verb} {name}")
    print(f"{verb} {len(names)} container(s)")
    return 0
