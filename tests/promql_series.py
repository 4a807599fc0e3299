"""Synthetic series for `promtool test rules`, at 1 s resolution: counters and histograms as promtool writes them.

A counter is "start+step x n" (n + 1 samples); "_" is no sample.
"""


def counter(per_s: float, n: int = 300) -> str:
    return f"0+{per_s}x{n}"


def histogram(name: str, labels: str, per_s: float, value_s: float, les=(0.1, 0.5, 1.0, 2.5, 5.0)) -> list[dict]:
    """A histogram of `per_s` observations a second, each of `value_s`."""
    out = []
    for le in [*les, "+Inf"]:
        rate = per_s if le == "+Inf" or value_s <= le else 0
        out.append({"series": f'{name}_bucket{{{labels}{"," if labels else ""}le="{le}"}}', "values": counter(rate)})
    return out


def promtool_test(promtool: str, tmp_path, spec: dict) -> None:
    """Runs `promtool test rules` on one unit-test file written from `spec`; fails with its output."""
    import subprocess

    import yaml

    (tmp_path / "test.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True,
                            check=False, timeout=60)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
