mod hub;
