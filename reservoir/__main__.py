from reservoir.cli import main

raise SystemExit(main())
