mod endpoint;
