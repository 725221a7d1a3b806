"""The benchmarks' figure line: median, spread and target, computed by hand."""

from bench.paired import ratio_line


def test_ratio_line_gives_median_spread_and_verdict():
    line = ratio_line("actor/bare", [0.90, 0.97, 0.93, 0.96, 0.95])
    assert "median 0.950" in line and "spread 0.900-0.970" in line and "over 5 paired" in line
    assert line.endswith("target >= 0.95: meets")
    assert ratio_line("buffer/raw at 1024 tokens", [0.64, 0.66], target=0.85).endswith("target >= 0.85: BELOW")
    assert "median 0.650" in ratio_line("x", [0.64, 0.66])         # even count: the mean of the middle two
