"""The ketch server (the ``server`` extra, on aiohttp).

:mod:`ketch.server._proxy` holds the model proxy's sub-application
(:func:`~ketch.server._proxy.proxy_app`), which ``ketch serve`` mounts at ``/proxy``.
"""
