mod clients;
mod conversation;
mod history;
mod models;
mod options;
mod support;
mod tools;
mod turns;
