"""From analysed data to what a reader sees: tables, figures, report headers, runs/README.md, the README's
findings pages, the paper's build, and the publish command that runs them as one transaction."""
