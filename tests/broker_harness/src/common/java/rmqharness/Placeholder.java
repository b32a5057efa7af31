package rmqharness;
class Placeholder {}
