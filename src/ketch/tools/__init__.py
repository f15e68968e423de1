"""Tools: the ``@tool`` decorator and the built-in coding tools."""
