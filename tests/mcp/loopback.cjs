// Preloaded into the MCP test server (node --require): servers that listen on a port
// without a host listen on 127.0.0.1 only, so the tests stay on the loopback interface.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const port = args[0];
  if ((typeof port === "number" || (typeof port === "string" && /^\d+$/.test(port))) && typeof args[1] !== "string") {
    args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
