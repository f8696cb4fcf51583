"""Text in, token ids out: corpora (yours, open English, open prose), their splits, tokenizers, token shards and the
overlap measure behind decontamination."""
