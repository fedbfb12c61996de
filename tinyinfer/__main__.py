from tinyinfer.cli import main

raise SystemExit(main())
