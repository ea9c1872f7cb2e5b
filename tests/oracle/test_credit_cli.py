"""``exchange credit``: prints the tables, writes the plot, exits 2 on bad input."""

from exchange.cli import main


def test_credit_command_prints_tables_and_plot(tmp_path, capsys):
    out = tmp_path / "oracle.png"
    code = main(["credit", "grpo", "rloo", "--env", "parity", "-G", "2", "--events", "5",
                 "--plot", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert "xor-1-3" in text and "T3 closed form matches" in text
    assert "+high" in text and "true |Q−V| mass" in text
    assert out.stat().st_size > 10_000


def test_credit_command_rejects_bad_input(capsys):
    assert main(["credit", "--env", "nope"]) == 2
    assert "env='nope'" in capsys.readouterr().err
    assert main(["credit", "-G", "1", "--env", "parity"]) == 2
    assert "--group-size=1" in capsys.readouterr().err
    assert main(["credit", "nonesuch", "--env", "parity"]) == 2
