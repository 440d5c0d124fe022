from trainee.cli import main

raise SystemExit(main())
