"""The HTTP front end: the FastAPI app (OpenAI-compatible routes, collections, keys), its guard and error mapping, the
uvicorn server and the web page."""
