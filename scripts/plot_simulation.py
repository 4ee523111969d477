"""Draws each run of the capacity simulation (benchmarks/sim/<deployment>-<scenario>.csv, written by
`bench simulate`) as a PNG beside it: webhooks waiting for their PSP's retry over time, and the deliveries a
second offered, applied and refused (429 by a throttle, 5xx by the outage, Lambda or DynamoDB), with the
table's write units against what it serves at once. Run through scripts/plot-simulation, which installs
matplotlib (requirements-dev.txt) into the project's venv."""

import csv
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {key: [float(r[key]) for r in rows] for key in rows[0]} if rows else {}


def hours(minutes):
    return [m / 60 for m in minutes]


def draw(path):
    data = read(path)
    if not data:
        return None
    t = hours(data["minute"])
    fig, (backlog, flow, table) = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    fig.suptitle(f"{path.stem}: webhooks over time (per-minute means)")
    backlog.plot(t, data["backlog"], color="tab:purple")
    backlog.set_ylabel("waiting for a retry")
    backlog.set_yscale("symlog")
    for key, color in [("offered", "tab:gray"), ("applied", "tab:green"),
                       ("refused_429", "tab:orange"), ("refused_5xx", "tab:red")]:
        flow.plot(t, data[key], label=key.replace("_", " "), color=color)
    flow.set_ylabel("deliveries / s")
    flow.set_yscale("symlog")
    flow.legend(loc="upper right")
    table.plot(t, data["wcu"], label="write units consumed / s", color="tab:blue")
    table.plot(t, data["wcu_capacity"], label="served at once / s", color="tab:blue", linestyle="--")
    table.plot(t, data["dynamodb_throttled"], label="webhooks throttled / s", color="tab:red")
    table.set_ylabel("DynamoDB")
    table.legend(loc="upper right")
    table.set_xlabel("hours from the start")
    for axis in (backlog, flow, table):
        axis.grid(True, alpha=0.3)
    out = path.with_suffix(".png")
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


def main(directory):
    for path in sorted(pathlib.Path(directory).glob("*.csv")):
        out = draw(path)
        if out:
            print(f"drew {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/sim")
