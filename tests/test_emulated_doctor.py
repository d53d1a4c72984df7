"""``wb.doctor(device="hpu")`` on the emulated Gaudi (tests/fakes): every check, in a fresh
process (fixture ``on_hpu``), with the training runs, bf16, the all-reduce and the launch on
real HPU tensors."""

import pytest


@pytest.mark.slow
def test_every_doctor_check_passes_on_the_emulated_hpu(on_hpu):
    out = on_hpu("""
        import workbench as wb
        r = wb.doctor("doctor", device="hpu", echo=False)
        out["checks"] = [[c.name, c.status, c.detail] for c in r.checks]
        out["exit_code"] = r.exit_code
    """)
    checks = {name: (status, detail) for name, status, detail in out["checks"]}
    assert {n: s for n, (s, _) in checks.items() if s != "pass"} == {}, out["checks"]
    for name in ("gpt2.train", "bert.train", "bf16", "all-reduce", "launch", "profile"):
        assert name in checks, f"{name} ran: {sorted(checks)}"
    assert "hccl all-reduce over 2 processes (hpu:0, hpu:0)" in checks["all-reduce"][1]
    assert "over hccl" in checks["launch"][1] and out["exit_code"] == 0
