"""Running a campaign: the lab sites it runs on (namespaces, a loopback, real agents),
each tool's run (iperf3, reservoir, gridftp, xrdcp), what is sampled while it runs,
progress, and the runner that writes results.json and the report
(:func:`.runner.run_campaign`; ``reservoir campaign run``)."""
