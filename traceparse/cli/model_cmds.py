"""CLI commands: model (calibrate, predict, whatif, diff). Each command parses options,
calls one library function and writes the output."""

from __future__ import annotations

import click

from traceparse.cli.main import main


@main.command("calibrate")
@click.argument("traces", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", "output", type=click.Path(), default="calibration.json",
              show_default=True, help="calibration.json path, or the directory for --export.")
@click.option("--export", "export", type=click.Choice(["vidur", "astra-sim", "genz"]),
              default=None, help="Also write simulator inputs into the -o directory.")
def calibrate_cmd(traces: tuple[str, ...], output: str, export: str | None) -> None:
    """Fit a performance model (launch overhead, kernel efficiency, copies, collectives)
    from TRACE... and write calibration.json (docs/calibration.md)."""
    from analyses.calibrate import calibrate, merge, to_json
    from traceparse.loader import load

    cal = merge([calibrate(load(t)) for t in traces])
    if export is None:
        from traceparse.cli.common import emit

        emit(to_json(cal), output)
        return
    from analyses.export import export_files
    from traceparse.atomic import atomic_path

    files = export_files(cal, export)
    files["calibration.json"] = to_json(cal)
    with atomic_path(output, directory=True) as tmp:
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
    click.echo(f"wrote {len(files)} files to {output}: {', '.join(sorted(files))}")
