mod endpoint;
mod tidy;
