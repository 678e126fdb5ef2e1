from agentgym.cli import main

raise SystemExit(main())
