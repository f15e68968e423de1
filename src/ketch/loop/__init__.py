"""The stateless tool-call loop. Imports only :mod:`ketch.llm`."""
