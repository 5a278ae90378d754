#!/usr/bin/env python3
"""Rewrites link/startup.order: the functions an idle daemon has run, so the linker puts them
together.

An idle daemon's resident memory is mostly its own code, mapped from the page cache in 64 KiB
windows around each page it touched. When the few hundred functions that run at startup are spread
over the whole text section, those windows cover a third of it; laid out side by side they cover
little more than their own size. `build.rs` hands this file to the linker
(`--symbol-ordering-file`) for release builds.

The names in the file are the exact symbols of one build (a generic function has one symbol per
use, told apart by a hash of the crate's build settings), so the file is made from the builds
people run: `cargo build --release -p ahpd` started with the cofold plugin, and the build
`cargo bench -p ahpd` makes, started with the echo plugin. Names a later build does not have are
skipped by the linker; after a dependency or profile change, run this again:

    python3 crates/ahpd/link/startup_order.py

It needs valgrind (callgrind counts which instructions ran) and takes about ten minutes, most of
it two release links.
"""

import bisect
import os
import re
import subprocess
import sys
import tempfile
import time

CRATE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKSPACE = os.path.dirname(os.path.dirname(CRATE))
ORDER = os.path.join(CRATE, "link", "startup.order")

# (what it is, the cargo command that builds target/release/ahpd, the plugin it starts with)
BUILDS = [
    ("cargo build --release -p ahpd", ["build", "--release", "-p", "ahpd"], "@ahpd/agent-cofold"),
    (
        "cargo bench -p ahpd",
        ["bench", "-p", "ahpd", "--bench", "startup", "--no-run"],
        "@ahpd/agent-echo",
    ),
]

# How long the daemon stays idle under callgrind after its listening line.
IDLE_SECONDS = 2.0
TEXT_PREFIXES = (".text.unlikely.", ".text.hot.", ".text.startup.", ".text.")


def target_dir():
    meta = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        cwd=WORKSPACE,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return re.search(r'"target_directory":"([^"]+)"', meta).group(1)


def build(args, link_map):
    """Builds with the linker writing its map; a fresh map path makes build.rs relink."""
    env = dict(os.environ, AHPD_LINK_MAP=link_map)
    subprocess.run(["cargo", *args], cwd=WORKSPACE, env=env, check=True)


def profile(binary, plugin, work):
    """Starts the daemon under callgrind, lets it idle, and returns the profile's path."""
    home = os.path.join(work, "home")
    os.makedirs(home, exist_ok=True)
    out = os.path.join(work, "cg.%p")
    env = dict(os.environ, HOME=home, XDG_CONFIG_HOME=home)
    env.pop("AHPD_CONFIG", None)
    env.pop("RUST_LOG", None)
    daemon = subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            "--dump-instr=yes",
            f"--callgrind-out-file={out}",
            binary,
            "--plugin",
            plugin,
            "--port",
            "0",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = daemon.stdout.readline()
        if "listening" not in line:
            sys.exit(f"the daemon did not start under valgrind (it printed {line!r})")
        time.sleep(IDLE_SECONDS)
        subprocess.run(
            ["callgrind_control", "--dump", str(daemon.pid)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        dumps = [f for f in os.listdir(work) if f.startswith("cg.") and f.endswith(".1")]
        if not dumps:
            sys.exit("callgrind wrote no profile")
        return os.path.join(work, dumps[0])
    finally:
        daemon.kill()
        daemon.wait()


def executed_addresses(profile_path, binary):
    """Every instruction address callgrind counted inside `binary`."""
    objects = {}
    current = None
    last = 0
    found = set()

    def named(text):
        m = re.match(r"\((\d+)\)(?: (.*))?", text)
        if not m:
            return text
        if m.group(2) is not None:
            objects[m.group(1)] = m.group(2)
        return objects.get(m.group(1))

    with open(profile_path, errors="replace") as f:
        for line in f:
            if line.startswith("ob="):
                current = named(line[3:].strip())
            elif line.startswith("cob="):
                named(line[4:].strip())
            elif line[:1] in "0123456789+-*" and line.strip():
                token = line.split()[0]
                try:
                    if token == "*":
                        pass
                    elif token[0] in "+-":
                        last += int(token, 0)
                    else:
                        last = int(token, 0)
                except ValueError:
                    continue
                if current == binary:
                    found.add(last)
    return found


def text_sections(link_map):
    """(start, size, symbol) of each function's own section, from an lld map."""
    sections = []
    with open(link_map) as f:
        for line in f:
            m = re.search(r":\((\.text\.\S+)\)$", line)
            if not m:
                continue
            cols = line.split()
            name = m.group(1)
            for prefix in TEXT_PREFIXES:
                if name.startswith(prefix):
                    name = name[len(prefix):]
                    break
            sections.append((int(cols[0], 16), int(cols[2], 16), name))
    sections.sort()
    return sections


def hot_symbols(addresses, sections):
    starts = [s[0] for s in sections]
    hot = {}
    for a in addresses:
        i = bisect.bisect_right(starts, a) - 1
        if i >= 0 and a < sections[i][0] + sections[i][1]:
            hot[sections[i][2]] = sections[i]
    return [s[2] for s in sorted(hot.values())], sum(s[1] for s in hot.values())


def release_profiles(manifest):
    """The [profile.release] and [profile.bench] tables, one trimmed line each (as build.rs)."""
    keep = False
    out = ""
    for line in manifest.splitlines():
        line = line.strip()
        if line.startswith("["):
            keep = line.startswith("[profile.release") or line.startswith("[profile.bench")
        if keep and line and not line.startswith("#"):
            out += line + "\n"
    return out


def made_for():
    """What the list fits: a hash of Cargo.lock, the compiler's version and the release and bench
    profiles, the things symbol names depend on (build.rs computes the same and compares)."""
    with open(os.path.join(WORKSPACE, "Cargo.lock"), "rb") as f:
        lock = f.read()
    with open(os.path.join(WORKSPACE, "Cargo.toml")) as f:
        profiles = release_profiles(f.read()).encode()
    version = subprocess.run(["rustc", "-V"], check=True, capture_output=True).stdout.strip()
    h = 0xCBF29CE484222325
    for byte in lock + b"\n" + version + b"\n" + profiles:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def main():
    binary = os.path.realpath(os.path.join(target_dir(), "release", "ahpd"))
    names = []
    seen = set()
    with tempfile.TemporaryDirectory() as work:
        for i, (what, args, plugin) in enumerate(BUILDS):
            link_map = os.path.join(work, f"build{i}-{os.getpid()}-{time.time_ns()}.map")
            build(args, link_map)
            run_dir = os.path.join(work, f"run{i}")
            os.makedirs(run_dir)
            addresses = executed_addresses(profile(binary, plugin, run_dir), binary)
            symbols, size = hot_symbols(addresses, text_sections(link_map))
            print(f"{what} with {plugin}: {len(symbols)} functions ran, {size} bytes of code")
            for s in symbols:
                if s not in seen:
                    seen.add(s)
                    names.append(s)
    with open(ORDER, "w") as f:
        f.write("# Functions that run while ahpd starts and idles, laid out together by the linker.\n")
        f.write("# Made by link/startup_order.py; see there before editing.\n")
        f.write(f"# made-for: {made_for()}\n")
        f.write("\n".join(names) + "\n")
    print(f"wrote {len(names)} names to {os.path.relpath(ORDER, WORKSPACE)}")


if __name__ == "__main__":
    main()
