"""The service's routes by concern: operations (health, metrics, the page), collections, the native ask API and
the OpenAI-compatible chat API. Each is an APIRouter that finds the app's engine through FastAPI dependencies."""
