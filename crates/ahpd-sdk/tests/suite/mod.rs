mod conversation;
mod handshake;
mod malformed;
mod many_clients;
mod paging;
mod reconnect;
mod rules;
mod support;
