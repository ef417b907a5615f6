"""Process exit codes shared by every subcommand (fixed by the diagnosis contract)."""

OK = 0  # healthy, or information only
WARNING = 1
CRITICAL = 2
UNDIAGNOSABLE = 3  # source unreachable or no usable data
USAGE = 64  # bad arguments or input (sysexits EX_USAGE); also "not built yet"
UNAVAILABLE = 69  # a backend or service that was asked for explicitly is not there (EX_UNAVAILABLE)
