"""A question's settings (run files, split by concern), the specs they resolve into, and the Pipeline that composes a
document or corpus, a retriever, a strategy and a reader to answer it."""
